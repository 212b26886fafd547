package inventory

import (
	"cmp"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/versions"
)

// Debian's defaults, where an application's own files do not say.
const (
	jellyfinDefaults      = "/etc/default/jellyfin"
	synapseConfig         = "/etc/matrix-synapse/homeserver.yaml"
	synapseConfD          = "/etc/matrix-synapse/conf.d"
	synapsePython         = "/opt/venvs/matrix-synapse/bin/python" // the package's own, with the sqlite3 module
	synapseWorkDir        = "/var/lib/matrix-synapse"              // the unit's WorkingDirectory: relative paths are under it
	frigateDefaultCompose = "/opt/frigate/docker-compose.yml"      // Frigate's documented install
	sambaConfig           = "/etc/samba/smb.conf"
)

// jellyfinFacts: Debian's jellyfin packages (or the same layout by hand).
func jellyfinFacts(v vm) AppFacts {
	f := AppFacts{Kind: KindBinary}
	env := shellVars(v.file(jellyfinDefaults))
	confDir := cmp.Or(env["JELLYFIN_CONFIG_DIR"], "/etc/jellyfin")
	dataDir := cmp.Or(env["JELLYFIN_DATA_DIR"], "/var/lib/jellyfin")
	if pkg, ver := v.packageVersion("jellyfin-server", "jellyfin"); ver != "" {
		f.Kind, f.Package, f.Version = KindDebian, pkg, ver
	}
	if v.exists(jellyfinDefaults) {
		f.ConfigFiles = append(f.ConfigFiles, jellyfinDefaults)
	}
	for _, e := range v.dir(confDir) {
		f.ConfigFiles = append(f.ConfigFiles, path.Join(confDir, e))
	}
	if f.Version == "" {
		// The server writes the version it last ran as into system.xml.
		if prev := xmlValues(v.file(path.Join(confDir, "system.xml")), "PreviousVersionStr"); len(prev) > 0 && prev[0] != "" {
			f.Version = prev[0]
		} else {
			f.Unread = append(f.Unread, "version: no jellyfin-server package (dpkg-query) and no PreviousVersionStr in system.xml")
		}
	}
	db := path.Join(dataDir, "data", "jellyfin.db")
	f.Database = &Database{Engine: EngineSQLite, Path: db}
	f.DataPaths = append(f.DataPaths, dataDir)
	cache := cmp.Or(env["JELLYFIN_CACHE_DIR"], "/var/cache/jellyfin")
	if v.exists(cache) {
		f.DataPaths = append(f.DataPaths, cache)
	}
	libs := path.Join(dataDir, "root", "default")
	for _, lib := range v.dir(libs) {
		f.LibraryPaths = append(f.LibraryPaths, xmlValues(v.file(path.Join(libs, lib, "options.xml")), "Path")...)
	}
	f.LibraryPaths = sortedSet(f.LibraryPaths)
	if accel := xmlValues(v.file(path.Join(confDir, "encoding.xml")), "HardwareAccelerationType"); len(accel) > 0 && !strings.EqualFold(accel[0], "none") {
		f.HWAccel = accel[0]
	}
	f.Tools = v.tools()
	// Users(Username): Jellyfin's accounts, as its EF Core model names them.
	if users, err := v.sqliteColumn(db, "Users", "Username"); err == nil {
		f.Users = sortedSet(users)
	} else {
		f.Unread = append(f.Unread, "users: "+err.Error())
	}
	return f
}

// synapseConf is what init reads of Synapse's configuration: never the
// database's password or any other secret.
type synapseConf struct {
	ServerName     string `yaml:"server_name"`
	PublicBaseURL  string `yaml:"public_baseurl"`
	MediaStorePath string `yaml:"media_store_path"`
	Database       *struct {
		Name string `yaml:"name"`
		Args struct {
			Database string `yaml:"database"`
			DBName   string `yaml:"dbname"`
			Host     string `yaml:"host"`
		} `yaml:"args"`
	} `yaml:"database"`
}

// synapseFacts: Debian's matrix-synapse-py3, which starts Synapse with
// --config-path on homeserver.yaml and on conf.d/ (its *.yaml files in
// name order, a later key winning).
func synapseFacts(v vm) (AppFacts, map[string]string) {
	f := AppFacts{Kind: KindBinary}
	if pkg, ver := v.packageVersion("matrix-synapse-py3", "matrix-synapse"); ver != "" {
		f.Kind, f.Package, f.Version = KindDebian, pkg, ver
	} else {
		f.Unread = append(f.Unread, "version: no matrix-synapse-py3 package (dpkg-query)")
	}
	files := []string{synapseConfig}
	for _, e := range v.dir(synapseConfD) {
		if strings.HasSuffix(e, ".yaml") {
			files = append(files, path.Join(synapseConfD, e))
		}
	}
	var conf synapseConf
	for _, p := range files {
		b := v.file(p)
		if b == nil {
			continue
		}
		f.ConfigFiles = append(f.ConfigFiles, p)
		var part synapseConf
		if err := yaml.Unmarshal(b, &part); err != nil {
			f.Unread = append(f.Unread, p+": not YAML Synapse could read")
			continue
		}
		mergeSynapse(&conf, part)
	}
	f.Database = &Database{Engine: EngineSQLite, Path: path.Join(synapseWorkDir, "homeserver.db")}
	if d := conf.Database; d != nil {
		switch d.Name {
		case "psycopg2":
			f.Database = &Database{Engine: EnginePostgreSQL, Name: cmp.Or(d.Args.Database, d.Args.DBName), Host: d.Args.Host}
		case "sqlite3":
			if d.Args.Database != "" {
				f.Database.Path = underDir(synapseWorkDir, d.Args.Database)
			}
		}
	}
	if f.Database.Engine == EngineSQLite {
		f.DataPaths = append(f.DataPaths, f.Database.Path)
	}
	f.DataPaths = append(f.DataPaths, underDir(synapseWorkDir, cmp.Or(conf.MediaStorePath, "media")))
	f.Tools = v.tools()
	if v.exists(synapsePython) {
		f.Tools = append(f.Tools, synapsePython)
	}
	var names map[string]string
	if conf.ServerName != "" {
		names = map[string]string{"server_name": conf.ServerName, "public_baseurl": conf.PublicBaseURL}
	}
	return f, names
}

func mergeSynapse(into *synapseConf, part synapseConf) {
	into.ServerName = cmp.Or(part.ServerName, into.ServerName)
	into.PublicBaseURL = cmp.Or(part.PublicBaseURL, into.PublicBaseURL)
	into.MediaStorePath = cmp.Or(part.MediaStorePath, into.MediaStorePath)
	if part.Database != nil {
		into.Database = part.Database
	}
}

// composeFile is what init reads of a Compose file.
type composeFile struct {
	Services map[string]struct {
		Image   string `yaml:"image"`
		Volumes []any  `yaml:"volumes"`
	} `yaml:"services"`
}

// frigateProject is the Compose project running Frigate's image, and
// its Compose file ("" when none); ok is false when Compose did not
// answer.
func frigateProject(v vm) (project, file string, ok bool) {
	projects, ok := v.composeProjects()
	for _, p := range projects {
		for _, cf := range strings.Split(p.ConfigFiles, ",") {
			if img, _ := frigateService(v.file(cf)); img != "" {
				return p.Name, cf, true
			}
		}
	}
	return "", "", ok
}

// frigateComposeFile is the Compose file of a Frigate project wherever
// it lives ("" when none).
func frigateComposeFile(v vm) string {
	_, file, _ := frigateProject(v)
	return file
}

// frigateFacts: Frigate's documented install, a Compose project; else a
// systemd unit of its own (frigate.service, running its container with
// docker run); else by hand beside the config in /opt/frigate.
func frigateFacts(v vm) AppFacts {
	f := AppFacts{Kind: KindBinary, Package: "frigate"}
	composePath := frigateDefaultCompose
	if project, file, ok := frigateProject(v); file != "" {
		f.Kind, f.Package, composePath = KindCompose, project, file
	} else if !ok && v.exists(frigateDefaultCompose) {
		f.Unread = append(f.Unread, "install: "+frigateDefaultCompose+" is there but docker compose ls did not answer")
	}
	img, vols := frigateService(v.file(composePath))
	if img != "" {
		f.ConfigFiles = append(f.ConfigFiles, composePath)
	} else if unit, uimg, uvols := frigateUnit(v); unit != "" {
		f.Kind, f.Package = KindService, path.Base(unit)
		f.ConfigFiles = append(f.ConfigFiles, unit)
		img, vols, composePath = uimg, uvols, "/"
	}
	configDir := "/opt/frigate/config"
	if img != "" {
		f.Version = versions.Tag(img)
		for _, vol := range vols {
			src, dst, _ := strings.Cut(vol, ":")
			dst, _, _ = strings.Cut(dst, ":")
			src = underDir(path.Dir(composePath), src)
			switch {
			case dst == "/config":
				configDir = src
			case strings.HasPrefix(dst, "/media/frigate"):
				f.DataPaths = append(f.DataPaths, src)
			}
		}
	}
	if f.Version == "" {
		f.Unread = append(f.Unread, "version: no Compose file or frigate.service naming Frigate's image")
	}
	conf := path.Join(configDir, "config.yml")
	b := v.file(conf)
	if b != nil {
		f.ConfigFiles = append(f.ConfigFiles, conf)
	}
	var c struct {
		Database struct {
			Path string `yaml:"path"`
		} `yaml:"database"`
		FFmpeg struct {
			HWAccelArgs any `yaml:"hwaccel_args"`
		} `yaml:"ffmpeg"`
	}
	_ = yaml.Unmarshal(b, &c)
	db := cmp.Or(c.Database.Path, "/config/frigate.db")
	if rest, ok := strings.CutPrefix(db, "/config/"); ok {
		db = path.Join(configDir, rest) // the container's /config is configDir
	}
	f.Database = &Database{Engine: EngineSQLite, Path: db}
	f.DataPaths = append([]string{configDir}, f.DataPaths...)
	switch a := c.FFmpeg.HWAccelArgs.(type) {
	case string:
		f.HWAccel = a
	case []any:
		if len(a) > 0 {
			f.HWAccel = "custom arguments"
		}
	}
	return f
}

// frigateService is the image and volumes of the Compose file's service
// running Frigate's image ("" when none does).
func frigateService(b []byte) (image string, volumes []string) {
	var cf composeFile
	if b == nil || yaml.Unmarshal(b, &cf) != nil {
		return "", nil
	}
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		s := cf.Services[name]
		if !strings.Contains(s.Image, "blakeblackshear/frigate") {
			continue
		}
		for _, vol := range s.Volumes {
			if str, ok := vol.(string); ok {
				volumes = append(volumes, str)
			}
		}
		return s.Image, volumes
	}
	return "", nil
}

// frigateUnitFiles are where systemd finds a frigate.service of its own.
var frigateUnitFiles = []string{"/etc/systemd/system/frigate.service", "/lib/systemd/system/frigate.service"}

// frigateUnit is a frigate.service whose ExecStart runs Frigate's image
// (docker or podman run): the unit's file, the image and the -v volumes;
// "" when there is none.
func frigateUnit(v vm) (unit, image string, volumes []string) {
	for _, p := range frigateUnitFiles {
		b := v.file(p)
		if b == nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			start, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart=")
			if !ok {
				continue
			}
			args := strings.Fields(strings.TrimLeft(start, "-@+!:"))
			for i, a := range args {
				switch {
				case strings.Contains(a, "blakeblackshear/frigate") && image == "":
					image = a
				case (a == "-v" || a == "--volume") && i+1 < len(args):
					volumes = append(volumes, args[i+1])
				case strings.HasPrefix(a, "--volume="), strings.HasPrefix(a, "-v="):
					_, vol, _ := strings.Cut(a, "=")
					volumes = append(volumes, vol)
				}
			}
		}
		return p, image, volumes // systemd takes the first file found
	}
	return "", "", nil
}

var smbPath = regexp.MustCompile(`(?im)^\s*path\s*=\s*(.+?)\s*$`)
var smbInclude = regexp.MustCompile(`(?im)^\s*include\s*=\s*(.+?)\s*$`)

// sambaFacts: Debian's samba, its shares in smb.conf (and the files it
// includes), its accounts in passdb.tdb.
func sambaFacts(v vm) AppFacts {
	f := AppFacts{Kind: KindBinary}
	if pkg, ver := v.packageVersion("samba"); ver != "" {
		f.Kind, f.Package, f.Version = KindDebian, pkg, ver
	}
	queue := []string{sambaConfig}
	for len(queue) > 0 && len(f.ConfigFiles) < 20 {
		p := queue[0]
		queue = queue[1:]
		b := v.file(p)
		if b == nil || slices.Contains(f.ConfigFiles, p) {
			continue
		}
		f.ConfigFiles = append(f.ConfigFiles, p)
		for _, m := range smbPath.FindAllSubmatch(b, -1) {
			f.LibraryPaths = append(f.LibraryPaths, string(m[1]))
		}
		for _, m := range smbInclude.FindAllSubmatch(b, -1) {
			if inc := string(m[1]); path.IsAbs(inc) && !strings.Contains(inc, "%") {
				queue = append(queue, inc)
			}
		}
	}
	f.LibraryPaths = sortedSet(f.LibraryPaths)
	f.DataPaths = []string{"/var/lib/samba/private/passdb.tdb"}
	// pdbedit -L: user:uid:full name. Not -w: that would bring the
	// password hashes out of the VM.
	if out, ok := v.run("pdbedit", "-L"); ok {
		for _, l := range strings.Split(out, "\n") {
			if name, _, ok := strings.Cut(l, ":"); ok && name != "" {
				f.Users = append(f.Users, name)
			}
		}
	} else {
		f.Unread = append(f.Unread, "users: pdbedit -L did not answer")
	}
	return f
}

// underDir is p, relative to dir when it is relative (./config).
func underDir(dir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(dir, p)
}

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
