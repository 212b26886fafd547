"""The lab's synapse.app.homeserver, installed in the venv as Debian's
matrix-synapse-py3 installs Synapse (/opt/venvs/matrix-synapse).

What the move depends on, as Synapse does it: the configuration from each
--config-path (a file, or a directory's *.yaml in order), merged top-level;
no server_name is a configuration error; the database (SQLite by Python's
sqlite3 module, PostgreSQL by psycopg2) carries schema_version and
schema_compat_version, and a database whose compat version is newer than
this Synapse's schema is refused; it serves /_matrix/client/versions,
/_matrix/federation/v1/version and /health on its listeners' addresses.
Everything else of a homeserver is absent.
"""
import http.server, json, os, signal, socketserver, sys, threading

import yaml

import synapse

# SCHEMA_VERSION / SCHEMA_COMPAT_VERSION by release (synapse/storage/schema/__init__.py
# at the release's tag): a version between two rows takes the lower row.
SCHEMAS = [((1, 98), 83, 83), ((1, 100), 84, 83), ((1, 110), 85, 84), ((1, 114), 87, 84), ((1, 118), 88, 84),
           ((1, 124), 89, 84), ((1, 128), 91, 84), ((1, 130), 92, 84), ((1, 145), 93, 84), ((1, 153), 94, 84)]


def schema():
    v = tuple(int(x) for x in synapse.__version__.split(".")[:2])
    row = SCHEMAS[0]
    for r in SCHEMAS:
        if r[0] <= v:
            row = r
    return row[1], row[2]


class ConfigError(Exception):
    pass


def config_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p)
                            if f.endswith(".yaml") and not f.startswith(".") and os.path.isfile(os.path.join(p, f)))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise ConfigError("Config file '%s' does not exist." % p)
    return files


def load_config(paths):
    config = {}
    for f in config_files(paths):
        with open(f, encoding="utf-8") as fh:
            part = yaml.safe_load(fh) or {}
        if not isinstance(part, dict):
            raise ConfigError("File %s is empty or doesn't parse into a key-value map." % f)
        config.update(part)
    if "server_name" not in config:
        raise ConfigError("Missing mandatory `server_name` config option.")
    if "report_stats" not in config:
        raise ConfigError("Please opt in or out of reporting homeserver usage statistics, by setting\nthe `report_stats` key in your config file to either True or False.")
    return config


def connect(config):
    db = config.get("database") or {"name": "sqlite3", "args": {"database": "homeserver.db"}}
    args = dict(db.get("args") or {})
    if db.get("name") == "sqlite3":
        import sqlite3
        return sqlite3.connect(args["database"]), "?"
    if db.get("name") == "psycopg2":
        import psycopg2
        keep = {k: args[k] for k in ("user", "password", "database", "dbname", "host", "port") if k in args}
        return psycopg2.connect(**keep), "%s"
    raise ConfigError("Unsupported database type '%s'" % db.get("name"))


def prepare_database(conn, mark):
    version, compat = schema()
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS schema_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, version INTEGER NOT NULL, upgraded BOOL NOT NULL, CHECK (Lock='X'))")
    cur.execute("CREATE TABLE IF NOT EXISTS schema_compat_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, compat_version INTEGER NOT NULL, CHECK (Lock='X'))")
    cur.execute("CREATE TABLE IF NOT EXISTS users(name TEXT, password_hash TEXT, creation_ts BIGINT, admin SMALLINT DEFAULT 0 NOT NULL, UNIQUE(name))")
    cur.execute("SELECT compat_version FROM schema_compat_version")
    row = cur.fetchone()
    if row and row[0] > version:
        raise ConfigError("Cannot use this database as it is too new for the server to understand")
    cur.execute("SELECT version FROM schema_version")
    have = cur.fetchone()
    if have is None:
        cur.execute("INSERT INTO schema_version(version, upgraded) VALUES (%s, %s)".replace("%s", mark), (version, False))
    elif have[0] < version:
        cur.execute("UPDATE schema_version SET version = %s, upgraded = %s".replace("%s", mark), (version, True))
    if row is None:
        cur.execute("INSERT INTO schema_compat_version(compat_version) VALUES (%s)".replace("%s", mark), (compat,))
    elif row[0] < compat:
        cur.execute("UPDATE schema_compat_version SET compat_version = %s".replace("%s", mark), (compat,))
    conn.commit()


def handler(config):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/_matrix/client/versions":
                body = {"versions": ["v1.1", "v1.2", "v1.3", "v1.4", "v1.5", "v1.6", "v1.7", "v1.8", "v1.9", "v1.10", "v1.11"], "unstable_features": {}}
            elif path == "/_matrix/federation/v1/version":
                body = {"server": {"name": "Synapse", "version": synapse.__version__}}
            elif path == "/health":
                self.reply(200, b"OK", "text/plain")
                return
            else:
                body = {"errcode": "M_UNRECOGNIZED", "error": "Unrecognized request"}
                self.reply(404, json.dumps(body).encode(), "application/json")
                return
            self.reply(200, json.dumps(body).encode(), "application/json")

        def reply(self, code, data, ctype):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):
            sys.stderr.write("synapse.access.http - %s - %s\n" % (self.address_string(), fmt % args))
    return H


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def listen(config):
    servers = []
    for l in config.get("listeners") or [{"port": 8008, "type": "http"}]:
        if l.get("type", "http") != "http":
            continue
        for addr in l.get("bind_addresses") or [os.environ.get("LAB_VM_ADDRESS", "127.0.0.1")]:
            if ":" in addr:
                continue  # IPv6: the lab's VMs have 127.B.1.N only
            s = Server((addr, int(l["port"])), handler(config))
            threading.Thread(target=s.serve_forever, daemon=True).start()
            servers.append(s)
            sys.stderr.write("synapse.app.homeserver - Synapse now listening on TCP port %s (%s)\n" % (l["port"], addr))
    return servers


def main(argv):
    paths = []
    generate_keys = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-c", "--config-path"):
            paths.append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--config-path="):
            paths.append(a.split("=", 1)[1])
        elif a == "--generate-keys":
            generate_keys = True
        i += 1
    try:
        config = load_config(paths or ["homeserver.yaml"])
        if generate_keys:
            return 0
        conn, mark = connect(config)
        prepare_database(conn, mark)
    except ConfigError as e:
        sys.stderr.write("Error in configuration:\n  %s\n" % e)
        return 1
    except Exception as e:  # noqa: BLE001 - a database that cannot be opened
        sys.stderr.write("Failed to prepare database: %s\n" % e)
        return 1
    listen(config)
    sys.stderr.write("synapse.app.homeserver - Synapse %s serving %s\n" % (synapse.__version__, config["server_name"]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
