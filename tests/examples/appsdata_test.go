package examples

import (
	"bytes"
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestHomelabAppsDataAndSynapseWhole runs every phase of examples/homelab
// against the lab home server (address block 28) and looks at the world
// before the rollback and after it: the Secret synapse-config holds the
// old VM's homeserver.yaml with the pod's paths and the runbook's
// registration secret; Jellyfin's and Frigate's data is on the data
// volume where their releases mount it; the old services were stopped
// before their data was copied, and the rollback started them again; and
// no secret of Synapse's configuration is in clear in what migrate
// printed or left in the runbook's directory (its state and logs
// included).
func TestHomelabAppsDataAndSynapseWhole(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the Matrix move's restore Job chowns to uid 991: it needs root, as migrate-lab demo does")
	}
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 28})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	identity := filepath.Join(dir, "secrets/demo-identity.txt")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+identity, "MIGRATE_VAR_federation_wait=1m")

	// The canaries: the runbook's registration secret, and the old
	// homeserver.yaml's own secrets (random at each seeding).
	ids, err := age.ParseIdentities(bytes.NewReader(must(os.ReadFile(identity))))
	if err != nil {
		t.Fatal(err)
	}
	autoVars := must(agefile.Decrypt(must(os.ReadFile(filepath.Join(dir, "secrets.auto.hcl.age"))), ids...))
	regSecret := regexp.MustCompile(`synapse_registration_secret = "([^"]+)"`).FindStringSubmatch(string(autoVars))[1]
	oldYAML := string(must(os.ReadFile(filepath.Join(h.Dir(), "incus/instances/matrix/rootfs/etc/matrix-synapse/homeserver.yaml"))))
	secrets := map[string]string{"the runbook's registration secret": regSecret}
	for _, m := range regexp.MustCompile(`(?m)^(registration_shared_secret|macaroon_secret_key|form_secret): "([^"]+)"$`).FindAllStringSubmatch(oldYAML, -1) {
		secrets["the old "+m[1]] = m[2]
	}
	if len(secrets) != 4 {
		t.Fatalf("the old homeserver.yaml's secrets: %v", secrets)
	}

	var seen bytes.Buffer
	do := func(args ...string) string {
		out := run(t, dir, env, args...)
		seen.WriteString(out)
		return out
	}
	for _, ph := range []string{"rehearsal", "platform", "data-apps", "host-services", "ingress-matrix", "cleanup"} {
		do("run", "--phase", ph, "--auto-approve", "--approve", "approval.dns")
	}

	// Synapse's configuration, in the Secret its release mounts at /config.
	kubeconfig := openKubeconfig(t, dir)
	config := secretData(t, kubeconfig, "matrix", "synapse-config")
	hs := config["homeserver.yaml"]
	for _, want := range []string{"\n    database: /data/homeserver.db\n", "\nmedia_store_path: /data/media\n", "\nsigning_key_path: /keys/homeserver.signing.key\n",
		"\npid_file: /data/homeserver.pid\n", "    bind_addresses: ['0.0.0.0']\n", "\nregistration_shared_secret_path: /config/registration_shared_secret\n",
		"\nserve_server_wellknown: true\n", `server_name: "matrix.example.org"`,
		`macaroon_secret_key: "` + secrets["the old macaroon_secret_key"] + `"`, `form_secret: "` + secrets["the old form_secret"] + `"`} {
		if !strings.Contains(hs, want) {
			t.Errorf("the Secret's homeserver.yaml lacks %q:\n%s", want, hs)
		}
	}
	for _, old := range []string{"/var/lib/matrix-synapse", "/etc/matrix-synapse", "/var/log/matrix-synapse", "registration_shared_secret:"} {
		if strings.Contains(hs, old) {
			t.Errorf("the Secret's homeserver.yaml keeps %q:\n%s", old, hs)
		}
	}
	if config["registration_shared_secret"] != regSecret {
		t.Error("the Secret's registration_shared_secret is not the runbook's")
	}
	// The ingress's certificate: the one the federation endpoint serves,
	// its key only in the cluster, never in what migrate printed.
	tlsSecret := secretData(t, kubeconfig, "matrix", "synapse-tls")
	if !strings.Contains(tlsSecret["tls.crt"], "BEGIN CERTIFICATE") || !strings.Contains(tlsSecret["tls.key"], "PRIVATE KEY") {
		t.Errorf("the Secret synapse-tls: keys %v", slices.Sorted(maps.Keys(tlsSecret)))
	}
	if strings.Contains(seen.String(), strings.TrimSpace(strings.Split(tlsSecret["tls.key"], "\n")[1])) {
		t.Error("migrate printed the ingress certificate's key")
	}
	deploy := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/matrix/deployments/synapse")
	for _, want := range []string{`{"name":"SYNAPSE_CONFIG_PATH","value":"/config/homeserver.yaml"}`, `"secretName":"synapse-config"`, `"mountPath":"/config"`} {
		if !strings.Contains(deploy, want) {
			t.Errorf("Synapse's Deployment lacks %s:\n%s", want, deploy)
		}
	}

	// Jellyfin's and Frigate's data, where their releases mount it.
	for path, want := range map[string]string{
		"apps/jellyfin/data/jellyfin.db":                      "the users: ana, ben",
		"apps/jellyfin/data/library.db":                       "/var/mnt/data/media/movies/",
		"apps/jellyfin/config/system.xml":                     "<IsStartupWizardCompleted>true</IsStartupWizardCompleted>",
		"apps/jellyfin/root/default/Movies/options.xml":       "<Path>/var/mnt/data/media/movies</Path>",
		"apps/jellyfin/metadata/library/ab/abcdef/poster.jpg": "a poster",
		"apps/frigate/config.yml":                             "driveway:",
		"apps/frigate/frigate.db":                             "the events of camera driveway",
	} {
		if b, err := os.ReadFile(filepath.Join(h.DataDir(), path)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("the data volume's %s: %q, %v; want it to hold %q", path, b, err, want)
		}
	}
	for release, mount := range map[string]string{"jellyfin": `"hostPath":{"path":"/var/mnt/data/apps/jellyfin","type":"Directory"}`,
		"frigate": `"hostPath":{"path":"/var/mnt/data/apps/frigate","type":"Directory"}`} {
		if got := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/media/deployments/"+release); !strings.Contains(got, mount) {
			t.Errorf("the Deployment %s does not mount %s:\n%s", release, mount, got)
		}
	}

	do("rollback", "--auto-approve")

	// The old services: each stopped before its data was copied, started
	// again by the rollback after the copy was removed.
	events, err := home.ReadEvents(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, e := range events {
		if e.Kind == home.EventExec && e.Instance == "services" {
			switch cmd := strings.Join(e.Command, " "); {
			case strings.HasPrefix(cmd, "systemctl "):
				services = append(services, cmd)
			case strings.Contains(cmd, "touch /root/.jellyfin-exported"):
				services = append(services, "export jellyfin")
			case strings.Contains(cmd, "touch /root/.frigate-exported"):
				services = append(services, "export frigate")
			}
		}
	}
	index := func(s string) int { return slices.Index(services, s) }
	for _, app := range []string{"jellyfin", "frigate"} {
		stop, export, start := index("systemctl stop "+app), index("export "+app), index("systemctl start "+app)
		if stop < 0 || export < stop || start < export {
			t.Errorf("%s in the old services VM: %v, want stopped, then exported, then started again", app, services)
		}
		if code := labExec(t, h, "services", "systemctl", "is-active", app); code != 0 {
			t.Errorf("%s is not active in the old services VM after the rollback: systemctl is-active exited %d", app, code)
		}
	}
	if _, err := os.Stat(filepath.Join(h.DataDir(), "apps")); !os.IsNotExist(err) {
		t.Errorf("the rollback left the apps' data on the volume: %v", err)
	}

	for what, c := range secrets {
		if strings.Contains(seen.String(), c) {
			t.Errorf("%s reached the terminal", what)
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && bytes.Contains(must(os.ReadFile(p)), []byte(c)) {
				t.Errorf("%s is in clear in %s", what, p)
			}
			return nil
		})
	}
}

// labExec runs a command in an instance of the lab's Incus host, through
// its API as the incus CLI would, and returns its exit code.
func labExec(t *testing.T, h *home.Home, instance string, argv ...string) int {
	t.Helper()
	opts, err := incusapi.RemoteOptions(h.ClientConfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := c.StartExec(ctx, instance, incusapi.ExecPost{Command: argv})
	if err != nil {
		t.Fatal(err)
	}
	code, err := c.WaitExec(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	return code
}
