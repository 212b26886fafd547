package apps

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Jellyfin's official image: data in /config (JELLYFIN_DATA_DIR),
// settings in /config/config (JELLYFIN_CONFIG_DIR), or --datadir and
// --configdir.
func jellyfin(v Version) Program {
	return func(ctx context.Context, c *Container) int {
		configDir := flagOr(c.Args, []string{"--configdir", "-c"}, c.Env["JELLYFIN_CONFIG_DIR"])
		if configDir == "" {
			dataDir := flagOr(c.Args, []string{"--datadir", "-d"}, c.Env["JELLYFIN_DATA_DIR"])
			if dataDir == "" {
				dataDir = "/config"
			}

			configDir = dataDir + "/config"
		}

		c.logf("[INF] Jellyfin version: %s", v)
		c.logf("[INF] Configuration directory path: %s", configDir)

		if err := jellyfinVersionCheck(c, configDir+"/system.xml", v); err != nil {
			c.logf("[FTL] %v", err)

			return 1
		}

		c.logf("[INF] Kestrel is listening on %s:8096", c.Addr)

		mux := http.NewServeMux()
		mux.Handle("/health", text("Healthy"))
		mux.Handle("/System/Info/Public", jsonBody(fmt.Sprintf(`{"ProductName":"Jellyfin Server","Version":"%s"}`, v)))

		return serve(ctx, c, 8096, mux)
	}
}

var previousVersion = regexp.MustCompile(`<PreviousVersionStr>([^<]*)</PreviousVersionStr>`)

// jellyfinVersionCheck refuses settings a newer Jellyfin last ran with
// (its migrations are one-way), then records v as the version that ran
// them, as the server does at start.
func jellyfinVersionCheck(c *Container, file string, v Version) error {
	host := c.Path(file)

	b, err := os.ReadFile(host)
	if os.IsNotExist(err) {
		b = []byte("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<ServerConfiguration xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\">\n</ServerConfiguration>\n")
	} else if err != nil {
		return fmt.Errorf("reading %s: %v", file, err)
	}

	if m := previousVersion.FindSubmatch(b); m != nil && len(m[1]) > 0 {
		prev, err := ParseVersion(string(m[1]))
		if err != nil {
			return fmt.Errorf("%s: PreviousVersionStr %q is not a version", file, m[1])
		}

		if v.Less(prev) {
			return fmt.Errorf("this Jellyfin (%s) is older than the one that last ran with this configuration (%s, PreviousVersionStr of %s): its database migrations are one-way; downgrading is not supported, run %s or newer", v, prev, file, prev)
		}
	}

	mark := "<PreviousVersionStr>" + v.String() + "</PreviousVersionStr>"

	switch {
	case previousVersion.Match(b):
		b = previousVersion.ReplaceAll(b, []byte(mark))
	case strings.Contains(string(b), "</ServerConfiguration>"):
		b = []byte(strings.Replace(string(b), "</ServerConfiguration>", "  "+mark+"\n</ServerConfiguration>", 1))
	default:
		return fmt.Errorf("%s is not a ServerConfiguration", file)
	}

	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return err
	}

	return os.WriteFile(host, b, 0o644)
}

// flagOr is the value of the first of flags in args ("--f v" or
// "--f=v"), else def.
func flagOr(args, flags []string, def string) string {
	for i, a := range args {
		for _, f := range flags {
			if a == f && i+1 < len(args) {
				return args[i+1]
			}

			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v
			}
		}
	}

	return def
}

// Frigate reads /config/config.yml (or config.yaml); its API on 5000.
func frigate(v Version) Program {
	return func(ctx context.Context, c *Container) int {
		found := ""

		for _, f := range []string{"/config/config.yml", "/config/config.yaml"} {
			if _, err := os.Stat(c.Path(f)); err == nil {
				found = f

				break
			}
		}

		if found == "" {
			c.logf("*************************************************************\n*** Your config file is not valid!                         ***\n*** No config file found at /config/config.yml           ***\n*************************************************************")

			return 1
		}

		c.logf("frigate.app INFO : Starting Frigate (%s-lab), config %s", v, found)

		mux := http.NewServeMux()
		mux.Handle("/api/version", text(v.String()+"-lab"))

		return serve(ctx, c, 5000, mux)
	}
}

// Samba (servercontainers' image): a share per SAMBA_VOLUME_CONFIG_*
// variable ("[name]; path=/p; ..."), whose path must exist; smbd on 445.
func samba(Version) Program {
	return func(ctx context.Context, c *Container) int {
		var names []string

		for k := range c.Env {
			if strings.HasPrefix(k, "SAMBA_VOLUME_CONFIG_") {
				names = append(names, k)
			}
		}

		sort.Strings(names)

		if len(names) == 0 {
			c.logf(">> no SAMBA_VOLUME_CONFIG_* variable: no share to serve")

			return 1
		}

		for _, k := range names {
			share, sharePath := parseShare(c.Env[k])
			if sharePath == "" {
				c.logf(">> %s: no path= in %q", k, c.Env[k])

				return 1
			}

			if fi, err := os.Stat(c.Path(sharePath)); err != nil || !fi.IsDir() {
				c.logf("smbd: share [%s]: path %s does not exist or is not a directory", share, sharePath)

				return 1
			}

			c.logf(">> share [%s] path=%s", share, sharePath)
		}

		c.logf("smbd version 4.20.6 started (lab stand-in: Debian's smbd serves the shares)")

		return smbd(ctx, c)
	}
}

func parseShare(s string) (name, sharePath string) {
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if strings.HasPrefix(part, "[") && strings.HasSuffix(part, "]") {
			name = strings.Trim(part, "[]")
		}

		if k, v, ok := strings.Cut(part, "="); ok && strings.TrimSpace(k) == "path" {
			sharePath = strings.TrimSpace(v)
		}
	}

	return name, sharePath
}

// act_runner registers with its instance: it needs the URL and token.
func actRunner(Version) Program {
	return func(ctx context.Context, c *Container) int {
		for _, k := range []string{"GITEA_INSTANCE_URL", "GITEA_RUNNER_REGISTRATION_TOKEN"} {
			if c.Env[k] == "" && c.Env[k+"_FILE"] == "" {
				c.logf("level=fatal msg=\"%s is not set\"", k)

				return 1
			}
		}

		c.logf("level=info msg=\"runner: %s, with version: lab, declared successfully\"", c.Env["GITEA_RUNNER_NAME"])

		return serveAll(ctx, c, map[int]http.Handler{8088: nil})
	}
}
