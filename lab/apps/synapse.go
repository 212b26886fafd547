package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// schemaRow is Synapse's SCHEMA_VERSION and SCHEMA_COMPAT_VERSION from a
// release on (synapse/storage/schema/__init__.py at the element-hq/synapse
// tag named): a version between two rows has the lower row's.
type schemaRow struct {
	from           Version
	schema, compat int
}

var schemaTable = []schemaRow{
	{Version{1, 98, 0}, 83, 83},
	{Version{1, 100, 0}, 84, 83},
	{Version{1, 110, 0}, 85, 84},
	{Version{1, 114, 0}, 87, 84},
	{Version{1, 118, 0}, 88, 84}, // to v1.122: v1.120.x is 88/84
	{Version{1, 124, 0}, 89, 84},
	{Version{1, 128, 0}, 91, 84},
	{Version{1, 130, 0}, 92, 84}, // to v1.142
	{Version{1, 145, 0}, 93, 84},
	{Version{1, 153, 0}, 94, 84}, // to v1.157.1
}

// SynapseSchema is the SCHEMA_VERSION and SCHEMA_COMPAT_VERSION of a
// Synapse release; ok is false before the table's first row.
func SynapseSchema(v Version) (schema, compat int, ok bool) {
	for i := len(schemaTable) - 1; i >= 0; i-- {
		if !v.Less(schemaTable[i].from) {
			return schemaTable[i].schema, schemaTable[i].compat, true
		}
	}

	return 0, 0, false
}

func synapse(v Version) Program {
	return func(ctx context.Context, c *Container) int {
		schema, compat, ok := SynapseSchema(v)
		if !ok {
			c.logf("error: the lab's Synapse stand-in starts at v%s; v%s is older", schemaTable[0].from, v)

			return 1
		}

		files, err := synapseConfigFiles(c)
		if err != nil {
			c.logf("%v", err)

			return 1
		}

		c.logf("Starting synapse with args -m synapse.app.homeserver --config-path %s", strings.Join(files, " --config-path "))

		cfg, err := readSynapseConfig(c, files)
		if err != nil {
			c.logf("Error in configuration:\n  %v", err)

			return 1
		}

		serverName, _ := cfg["server_name"].(string)
		c.logf("synapse.app.homeserver - Server %s, version %s (schema %d)", serverName, v, schema)

		if err := prepareDatabase(ctx, c, cfg, serverName, schema, compat); err != nil {
			c.logf("synapse.storage.prepare_database - %v", err)

			return 1
		}

		port := synapseHTTPPort(cfg)
		c.logf("synapse.app - Synapse now listening on TCP port %d", port)

		mux := http.NewServeMux()
		mux.Handle("/health", text("OK"))
		mux.Handle("/_matrix/client/versions", jsonBody(`{"versions":["r0.6.1","v1.1","v1.2","v1.3","v1.4","v1.5","v1.6","v1.7","v1.8","v1.9","v1.10","v1.11"],"unstable_features":{}}`))
		mux.Handle("/_matrix/federation/v1/version", jsonBody(fmt.Sprintf(`{"server":{"name":"Synapse","version":"%s"}}`, v)))

		// serve_server_wellknown: federation on 443 of server_name's host,
		// as synapse/rest/well_known.py delegates it.
		if on, _ := cfg["serve_server_wellknown"].(bool); on {
			host, port := serverNameHostPort(serverName)
			mux.Handle("/.well-known/matrix/server", jsonBody(fmt.Sprintf(`{"m.server":%q}`, host+":"+port)))
		}

		return serve(ctx, c, port, mux)
	}
}

// synapseConfigFiles are the config files as the image's start.py and
// Synapse's find_config_files find them: --config-path/-c arguments (a
// directory gives its *.yaml files, sorted), else SYNAPSE_CONFIG_PATH or
// /data/homeserver.yaml, which must exist.
func synapseConfigFiles(c *Container) ([]string, error) {
	args := c.Args
	if len(args) > 0 && (args[0] == "/start.py" || args[0] == "start.py") {
		args = args[1:]
	}

	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if args[0] != "run" {
			return nil, fmt.Errorf("error: the lab's Synapse stand-in runs mode \"run\" only, not %q", args[0])
		}

		args = args[1:]
	}

	var paths []string

	for i := 0; i < len(args); i++ {
		a := args[i]

		switch {
		case strings.HasPrefix(a, "--config-path="):
			paths = append(paths, strings.TrimPrefix(a, "--config-path="))
		case (a == "--config-path" || a == "-c") && i+1 < len(args):
			paths = append(paths, args[i+1])
			i++
		}
	}

	if len(paths) == 0 {
		p := c.Env["SYNAPSE_CONFIG_PATH"]
		if p == "" {
			dir := c.Env["SYNAPSE_CONFIG_DIR"]
			if dir == "" {
				dir = "/data"
			}

			p = dir + "/homeserver.yaml"
		}

		if _, err := os.Stat(c.Path(p)); err != nil {
			return nil, fmt.Errorf("Config file '%s' does not exist. You should either create a new config file by running with the `generate` argument (and then edit the resulting file before restarting) or specify the path to an existing config file with the SYNAPSE_CONFIG_PATH variable.", p) //nolint:staticcheck // start.py's words
		}

		paths = []string{p}
	}

	var files []string

	for _, p := range paths {
		fi, err := os.Stat(c.Path(p))
		if err != nil || !fi.IsDir() {
			files = append(files, p)

			continue
		}

		ents, _ := os.ReadDir(c.Path(p)) //nolint:errcheck
		var names []string

		for _, e := range ents {
			switch {
			case e.IsDir():
				c.logf("Found subdirectory in config directory: %q. IGNORING.", path.Join(p, e.Name()))
			case !strings.HasSuffix(e.Name(), ".yaml"):
				c.logf("Found file in config directory that does not end in '.yaml': %q. IGNORING.", path.Join(p, e.Name()))
			default:
				names = append(names, e.Name())
			}
		}

		sort.Strings(names)

		for _, n := range names {
			files = append(files, path.Join(p, n))
		}
	}

	return files, nil
}

// readSynapseConfig merges the files' top-level keys, later files winning,
// and checks the two keys Synapse refuses to start without.
func readSynapseConfig(c *Container, files []string) (map[string]any, error) {
	cfg := map[string]any{}

	for _, f := range files {
		b, err := os.ReadFile(c.Path(f))
		if err != nil {
			return nil, fmt.Errorf("[Errno 2] No such file or directory: '%s'", f)
		}

		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil || m == nil {
			c.logf("File %q is empty or doesn't parse into a key-value map. IGNORING.", f)

			continue
		}

		for k, v := range m {
			cfg[k] = v
		}
	}

	if _, ok := cfg["server_name"]; !ok {
		return nil, fmt.Errorf("Missing mandatory `server_name` config option.") //nolint:staticcheck // Synapse's words
	}

	if _, ok := cfg["report_stats"]; !ok {
		return nil, fmt.Errorf("Please opt in or out of reporting homeserver usage statistics, by setting the `report_stats` key in your config file to either True or False.") //nolint:staticcheck // Synapse's words
	}

	return cfg, nil
}

func synapseHTTPPort(cfg map[string]any) int {
	listeners, _ := cfg["listeners"].([]any)
	for _, l := range listeners {
		m, _ := l.(map[string]any)
		if t, _ := m["type"].(string); t == "http" {
			if p, ok := m["port"].(float64); ok {
				return int(p)
			}
		}
	}

	return 8008
}

// prepareDatabase checks and upgrades the schema markers of the SQLite
// database as Synapse's prepare_database does.
func prepareDatabase(ctx context.Context, c *Container, cfg map[string]any, serverName string, schema, compat int) error {
	db, _ := cfg["database"].(map[string]any)
	name, _ := db["name"].(string)
	args, _ := db["args"].(map[string]any)
	file, _ := args["database"].(string)

	switch {
	case db == nil:
		name, file = "sqlite3", "/data/homeserver.db"
	case name == "psycopg2":
		return preparePostgres(ctx, c, args, serverName, schema, compat)
	case name != "sqlite3":
		return fmt.Errorf("Unsupported database type %q", name)
	case file == "":
		return fmt.Errorf("database.args.database is not set")
	}

	host := c.Path(file)
	if !path.IsAbs(file) {
		host = c.Path("/" + file)
	}

	c.logf("synapse.storage.databases - [master]: Checking database server (%s: %s)", name, file)

	st, err := sqliteSchema(ctx, host, "read", 0, 0)
	if err != nil {
		return fmt.Errorf("database %s: %w", file, err)
	}

	if st.Compat != nil && *st.Compat > schema {
		return fmt.Errorf("Cannot use this database as it is too new for the server to understand (its schema_compat_version is %d, this Synapse's SCHEMA_VERSION %d)", *st.Compat, schema)
	}

	if st.User != "" {
		if _, domain, _ := strings.Cut(st.User, ":"); domain != serverName {
			return fmt.Errorf("Found users in database not native to %s!\nYou cannot change a synapse server_name after it's been configured", serverName)
		}
	}

	if _, err := sqliteSchema(ctx, host, "write", schema, compat); err != nil {
		return fmt.Errorf("database %s: %w", file, err)
	}

	return nil
}

type schemaState struct {
	Version *int   `json:"version"`
	Compat  *int   `json:"compat"`
	User    string `json:"user"`
}

// sqliteScript reads (and with "write" brings up) Synapse's schema
// markers: through python3's sqlite3 module, as Synapse reads SQLite.
const sqliteScript = `
import json, sqlite3, sys
path, mode, schema, compat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
db = sqlite3.connect(path)
c = db.cursor()
c.execute("CREATE TABLE IF NOT EXISTS schema_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, version INTEGER NOT NULL, upgraded BOOL NOT NULL, CHECK (Lock='X'))")
c.execute("CREATE TABLE IF NOT EXISTS schema_compat_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, compat_version INTEGER NOT NULL, CHECK (Lock='X'))")
row = c.execute("SELECT version FROM schema_version").fetchone()
version = row[0] if row else None
row = c.execute("SELECT compat_version FROM schema_compat_version").fetchone()
cv = row[0] if row else None
user = ""
if c.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='users'").fetchone():
    row = c.execute("SELECT name FROM users LIMIT 1").fetchone()
    user = row[0] if row else ""
if mode == "write":
    if cv is None or cv < compat:
        c.execute("DELETE FROM schema_compat_version")
        c.execute("INSERT INTO schema_compat_version(compat_version) VALUES (?)", (compat,))
    if version is None:
        c.execute("INSERT INTO schema_version(version, upgraded) VALUES (?, ?)", (schema, False))
    elif version < schema:
        c.execute("UPDATE schema_version SET version = ?, upgraded = ?", (schema, True))
    db.commit()
print(json.dumps({"version": version, "compat": cv, "user": user}))
`

func sqliteSchema(ctx context.Context, file, mode string, schema, compat int) (schemaState, error) {
	var st schemaState

	out, err := exec.CommandContext(ctx, "python3", "-c", sqliteScript, file, mode, fmt.Sprint(schema), fmt.Sprint(compat)).CombinedOutput()
	if err != nil {
		// the exception, as Synapse's traceback ends (the host's path is
		// the lab's, not the container's: not shown)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")

		return st, errors.New(lines[len(lines)-1])
	}

	if err := json.Unmarshal(out, &st); err != nil {
		return st, err
	}

	return st, nil
}

// serverNameHostPort splits server_name as parse_server_name does; the
// port is 443 when it names none (the well-known delegation's).
func serverNameHostPort(name string) (host, port string) {
	if h, p, err := net.SplitHostPort(name); err == nil {
		return h, p
	}

	return name, "443"
}
