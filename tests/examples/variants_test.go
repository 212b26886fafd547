package examples

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
)

// TestHomelabPostgresComposeMoveAndBack runs the whole move of
// examples/homelab and its rollback against the lab home server (address
// block 37) whose old VMs are Debian hosts with the other variants: Synapse
// on PostgreSQL 15 in its VM, Frigate in Compose, hardware decoding on
// already. The runbook is told so as migrate init would tell it
// (synapse_database = "psycopg2"). It looks at the world: the database
// dumped by pg_dump as the postgres user, beside the script the new
// PostgreSQL restores it with at its first start; Synapse's configuration
// pointing at that PostgreSQL with the old password, which is sealed and
// never in clear; the moved settings keeping the old VM's hardware
// decoding; and after the rollback the old Synapse, PostgreSQL, Jellyfin,
// Frigate (its Compose project) and Samba running again, nothing of the
// move left on the data volume.
func TestHomelabPostgresComposeMoveAndBack(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the Matrix move's restore Job chowns to uid 991, and the Debian root is built as root: it needs root, as migrate-lab demo does")
	}
	// synapse-postgres runs Debian's real PostgreSQL 15 (lab/apps).
	if _, err := os.Stat(apps.PostgresBin("15") + "/postgres"); err != nil {
		t.Fatalf("the lab's postgres:15 pods need Debian's postgresql-15 on the host: run scripts/postgres-install.sh (make services): %v", err)
	}
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 37,
		OldHost: &incushost.OldHost{SynapseDB: "psycopg2", HWAccel: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if !slices.Contains(h.Env(), "MIGRATE_VAR_synapse_database=psycopg2") {
		t.Fatalf("the lab's environment does not tell the runbook Synapse runs on PostgreSQL: %v", h.Env())
	}
	dir := copyExample(t, "homelab")
	identity := filepath.Join(dir, "secrets/demo-identity.txt")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+identity, "MIGRATE_VAR_federation_wait=1m")
	oldYAML := string(must(os.ReadFile(filepath.Join(h.Dir(), "incus/instances/matrix/rootfs/etc/matrix-synapse/homeserver.yaml"))))
	password := regexp.MustCompile(`(?m)^    password: "([^"]+)"$`).FindStringSubmatch(oldYAML)
	if password == nil {
		t.Fatalf("the old homeserver.yaml names no PostgreSQL password:\n%s", oldYAML)
	}

	var seen bytes.Buffer
	for _, ph := range []string{"rehearsal", "platform", "data-apps", "host-services", "ingress-matrix", "cleanup"} {
		seen.WriteString(run(t, dir, env, "run", "--phase", ph, "--auto-approve", "--approve", "approval.dns"))
	}

	// The dump, made in the old VM by pg_dump (its custom format starts
	// with PGDMP), and the script the postgres image runs at first start.
	matrix := filepath.Join(h.DataDir(), "matrix")
	if b, err := os.ReadFile(filepath.Join(matrix, "postgres-init/synapse.dump")); err != nil || !bytes.HasPrefix(b, []byte("PGDMP")) {
		t.Errorf("the PostgreSQL dump on the share: %v, starts %q", err, b[:min(len(b), 8)])
	}
	if b, err := os.ReadFile(filepath.Join(matrix, "postgres-init/restore-synapse.sh")); err != nil || !strings.Contains(string(b), "pg_restore") {
		t.Errorf("the restore script on the share: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(matrix, "homeserver.db")); !os.IsNotExist(err) {
		t.Errorf("a SQLite database on the share of a Synapse on PostgreSQL: %v", err)
	}

	kubeconfig := openKubeconfig(t, dir)
	hs := secretData(t, kubeconfig, "matrix", "synapse-config")["homeserver.yaml"]
	for _, want := range []string{"\ndatabase:\n  name: psycopg2\n  args:\n    user: synapse\n    password: '" + password[1] + "'\n    dbname: synapse\n    host: synapse-postgres\n",
		"\nserver_name: " + home.MatrixDomain + "\n"} {
		if !strings.Contains(hs, want) {
			t.Errorf("the Secret's homeserver.yaml lacks %q:\n(%d bytes)", strings.ReplaceAll(want, password[1], "PASSWORD"), len(hs))
		}
	}
	if got := secretData(t, kubeconfig, "matrix", "synapse-postgres")["password"]; got != password[1] {
		t.Error("the Secret synapse-postgres does not hold the old PostgreSQL password")
	}
	pg := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/matrix/deployments/synapse-postgres")
	for _, want := range []string{`"replicas":1`, `"image":"postgres:15-bookworm"`, `"claimName":"synapse-postgres-init"`, `"mountPath":"/docker-entrypoint-initdb.d"`} {
		if !strings.Contains(pg, want) {
			t.Errorf("the Deployment synapse-postgres lacks %s", want)
		}
	}
	// The old VM decoded on a GPU already: the moved settings keep it.
	for path, want := range map[string]string{
		"apps/jellyfin/config/encoding.xml": "<HardwareAccelerationType>vaapi</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>\n</EncodingOptions>",
		"apps/frigate/config.yml":           "\nffmpeg:\n  hwaccel_args: preset-vaapi\n",
	} {
		if b, err := os.ReadFile(filepath.Join(h.DataDir(), path)); err != nil || !strings.Contains(string(b), want) || strings.Count(string(b), "hwaccel") > 1 {
			t.Errorf("the data volume's %s: %v\n%s", path, err, b)
		}
	}

	seen.WriteString(run(t, dir, env, "rollback", "--auto-approve"))

	for vm, checks := range map[string][][]string{
		"matrix": {{"systemctl", "is-active", "matrix-synapse"}, {"systemctl", "is-active", "postgresql"},
			{"runuser", "-u", "postgres", "--", "psql", "-Atc", "SELECT count(*) FROM users", "synapse"}},
		"services": {{"systemctl", "is-active", "jellyfin"}, {"systemctl", "is-active", "smbd"},
			{"sh", "-c", `docker compose ls --format json | grep -q '"Name": *"frigate", *"Status": *"running'`}},
	} {
		for _, argv := range checks {
			if code := labExec(t, h, vm, argv...); code != 0 {
				t.Errorf("after the rollback, in the old VM %s: %v exited %d", vm, argv, code)
			}
		}
	}
	for _, left := range []string{"matrix", "apps"} {
		if _, err := os.Stat(filepath.Join(h.DataDir(), left)); !os.IsNotExist(err) {
			t.Errorf("the rollback left %s on the data volume: %v", left, err)
		}
	}
	if strings.Contains(seen.String(), password[1]) {
		t.Error("the old PostgreSQL password reached the terminal")
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && bytes.Contains(must(os.ReadFile(p)), []byte(password[1])) {
			t.Errorf("the old PostgreSQL password is in clear in %s", p)
		}
		return nil
	})
}

// TestHomelabFrigateServiceMoveAndBack runs the move up to data-apps and
// its rollback against a lab (address block 53) whose old Frigate is a
// frigate.service of its own (docker run in its unit), not a Compose
// project, as migrate init tells the runbook (frigate_install =
// "service"): data-apps stops it with systemctl (the old unit inactive
// while the new Frigate answers its health check), and the rollback
// starts the unit again.
func TestHomelabFrigateServiceMoveAndBack(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the Debian root is built as root: it needs root, as migrate-lab demo does")
	}
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 53,
		OldHost: &incushost.OldHost{FrigateService: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if !slices.Contains(h.Env(), "MIGRATE_VAR_frigate_install=service") {
		t.Fatalf("the lab's environment does not tell the runbook Frigate is a service: %v", h.Env())
	}
	dir := copyExample(t, "homelab")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
	var seen strings.Builder
	for _, ph := range []string{"rehearsal", "platform", "data-apps"} {
		seen.WriteString(run(t, dir, env, "run", "--phase", ph, "--auto-approve"))
	}
	if !strings.Contains(seen.String(), "check group.frigate.http_check.health: done") {
		t.Errorf("data-apps did not show Frigate's health check:\n%s", seen.String())
	}
	if code := labExec(t, h, "services", "systemctl", "is-active", "frigate"); code != 3 {
		t.Errorf("after data-apps, the old frigate.service: is-active exited %d, want 3 (inactive)", code)
	}
	run(t, dir, env, "rollback", "--auto-approve")
	if code := labExec(t, h, "services", "systemctl", "is-active", "frigate"); code != 0 {
		t.Errorf("after the rollback, the old frigate.service: is-active exited %d, want 0", code)
	}
	if code := labExec(t, h, "services", "sh", "-c", `[ "$(docker compose ls --all --format json)" = "[]" ]`); code != 0 {
		t.Errorf("a Compose project appeared in the old VM")
	}
}
