// Package apps holds the lab's stand-ins for the images of the apps the
// example moves: lab/kubecp picks a container's program by its image
// (Lookup: name and tag; the tag is the stand-in's version) and runs it
// with the pod's mounts (Container.Path), env, arguments and address.
// Each stand-in behaves as the real image does in what the move depends
// on, and serves its health endpoint:
//
//   - Synapse (matrixdotorg/synapse, ghcr.io/element-hq/synapse): the
//     official image's start.py and homeserver: its config from
//     --config-path files and directories (their *.yaml sorted, merged at
//     the top level as read_config_files does), else SYNAPSE_CONFIG_PATH
//     or /data/homeserver.yaml; refuses a config without server_name or
//     report_stats, a SQLite database whose schema_compat_version is newer
//     than its SCHEMA_VERSION (the table in synapse.go, read from Synapse's
//     tags) and one whose users are of another server_name; brings the
//     schema markers up to its version as prepare_database does (on
//     PostgreSQL too, database.name psycopg2: it connects with
//     database.args' user, password, dbname and host, a Service's name
//     resolved by Container.Resolve, and refuses a collation other than
//     C as Synapse does); serves
//     /health, /_matrix/client/versions and /_matrix/federation/v1/version
//     (its image's version) on its config's http listener port (8008),
//     and /.well-known/matrix/server ({"m.server": "HOST:443"} of
//     server_name) when serve_server_wellknown is set.
//   - Jellyfin (jellyfin/jellyfin): /config/config/system.xml; refuses a
//     PreviousVersionStr newer than its version, writes its own there;
//     GET /health "Healthy" on 8096.
//   - Frigate (ghcr.io/blakeblackshear/frigate): needs /config/config.yml
//     (or .yaml); GET /api/version on 5000.
//   - Samba (ghcr.io/servercontainers/samba): shares from
//     SAMBA_VOLUME_CONFIG_*, each path must exist; served over SMB on
//     445 by Debian's own smbd and samba-dcerpcd (smbd.go), guests may
//     list them (smbclient -L, smb_check); without Debian's samba
//     installed, TCP 445 only. Its accounts are imported as the image's
//     entrypoint imports them (smbaccounts.go): ACCOUNT_<name> a
//     password or an smbpasswd line (pdbedit -L -w's: its hashes kept),
//     UID_<name> the uid; a Unix user each, then smbpasswd -a -n, the
//     line's hashes written over the entry, smbpasswd -e, into the
//     image's passdb (smbpasswd) in the pod's root. A container with a
//     command (a wrapper exporting ACCOUNT_* before exec'ing the image's
//     /container/scripts/entrypoint.sh) has that command run in
//     lab/sandbox with the pod's mounts; what it exported is what the
//     accounts are read from.
//   - ingress-nginx's controller (ingress.go): the Ingresses of its
//     --ingress-class ("nginx") from the cluster (Container.Routes, set
//     by lab/kubecp), on 80 and 443: TLS with the certificate of the
//     kubernetes.io/tls Secret spec.tls names for the SNI's host, else
//     its self-signed "Kubernetes Ingress Controller Fake Certificate";
//     HTTP to a host with TLS redirected (308) to HTTPS; the rule of the
//     host (a wildcard covers one label) and the longest path (Prefix by
//     path elements, Exact first) proxied to a Ready pod of its Service
//     at the port's targetPort, with the client's Host, X-Forwarded-*
//     and X-Real-IP; 404 for no rule, 503 for a Service without a Ready
//     pod, 502 when the pod does not answer, as nginx's pages; /healthz
//     on 10254. Not read: annotations (rewrites, auth, ssl-redirect off),
//     defaultBackend, the controller's ConfigMap; no status.loadBalancer.
//   - act_runner (gitea/act_runner): needs its instance URL and
//     registration token; its cache server on 8088.
//
// Images of plain userlands (busybox, alpine, debian, ubuntu, postgres) have no
// stand-in: lab/kubecp runs the container's command with the host's
// programs, as for Job pods (Lookup says so with Command).
//
// postgres:MAJOR[-bookworm|.MINOR...] runs the real PostgreSQL: Debian's
// postgresql-MAJOR of the host (/usr/lib/postgresql/MAJOR/bin, on the
// image's PATH; scripts/postgres-install.sh), in a root laid out as the
// image's (Image.Userland, postgres.go): the postgres user (uid 999),
// /var/run/postgresql, PGDATA /var/lib/postgresql/data, and
// docker-entrypoint.sh (postgres-entrypoint.sh: the image's, cut to what
// the lab uses). On an empty PGDATA it runs initdb
// (POSTGRES_INITDB_ARGS; POSTGRES_USER the superuser, its password from
// POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE, none refused), wants that
// password on host connections (password_encryption's method,
// scram-sha-256), creates POSTGRES_DB and runs
// /docker-entrypoint-initdb.d's files on a socket-only server (*.sh run
// when executable, else sourced; *.sql and *.sql.gz through psql); a
// failing one ends the container, its PGDATA left half-made (the next
// start skips the initialisation, as the image's). Then postgres runs in
// the foreground as uid 999 (setpriv for the image's gosu) on the pod's
// address, port 5432, and /var/run/postgresql. postgres itself refuses a
// PGDATA of another major ("database files are incompatible with
// server"). Job containers of postgres images get the same PATH
// (pg_isready, psql, pg_restore). What differs: the image listens on
// '*' and trusts its own loopback; in the lab the pods share the host's
// loopback, so it listens on the pod's address only and wants the
// password from 127.0.0.1 too; the image's LANG (en_US.utf8) is not set
// (initdb's locale is C unless POSTGRES_INITDB_ARGS says otherwise);
// only the host's majors run (Debian 12: 15).
//
// What differs from the real images: the stand-ins are Go functions run
// in the lab's own process (lab/kubecp's goroutines, not a chroot), reading
// the pod's files through its mounts; they store nothing but the markers
// above (Synapse's schema tables through python3's sqlite3 module, as
// Synapse itself reads SQLite; Jellyfin's system.xml); Samba's smbd runs
// as the lab's user (root) from the lab's process, with an smb.conf of
// its own (the image's defaults the lab relies on: standalone server,
// map to guest = Bad User, passdb backend = smbpasswd; not its fruit/
// Time Machine settings, avahi, wsdd2, nmbd or GROUP_*/GROUPS_*
// variables), its passdb and state under the container's root and its
// sockets in a short directory of /tmp, where smbd (in a mount namespace
// of its own) also sees each share's mount at its container path, so an
// account's uid reaches the files whatever the lab's directories above
// them allow; the accounts' Unix users are
// the pod's /etc/passwd and /etc/group, which only that smbd sees
// (Debian's libnss-wrapper preloaded: NSS_WRAPPER_PASSWD/GROUP), never
// the host's. The image is Alpine's Samba 4.20, the lab runs the host's
// (Debian 12: 4.17).
package apps
