package examples

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestHomelabAppsDataAndSynapseWhole runs every phase of examples/homelab
// against the lab home server (address block 28) whose old VMs are Debian
// hosts (Synapse's package with conf.d and no sqlite3, Frigate in
// Compose, Samba with two accounts, hardware decoding off), and looks at
// the world before the rollback and after it: the Secret synapse-config
// holds the old homeserver.yaml and conf.d merged, with the pod's paths
// and the runbook's registration secret; Jellyfin's and Frigate's data is
// on the data volume where their releases mount it, hardware decoding on
// in the moved copies only; Samba's accounts are in the Secret the new
// Samba imports, and ana logs in to it with her old password; the old
// services were stopped before their data was copied (Frigate through
// Compose, smbd before the new Samba), and the rollback started them
// again; and no secret (the registration secret,
// the signing key, the accounts' NT hashes, the old password a moved
// account logs in to the new Samba with) is in clear in what migrate
// printed or left in the runbook's directory (its state and logs
// included).
func TestHomelabAppsDataAndSynapseWhole(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the Matrix move's restore Job chowns to uid 991, and the Debian root is built as root: it needs root, as migrate-lab demo does")
	}
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 28, OldHost: &incushost.OldHost{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	identity := filepath.Join(dir, "secrets/demo-identity.txt")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+identity, "MIGRATE_VAR_federation_wait=1m")
	rootfs := func(vm, path string) string {
		return string(must(os.ReadFile(filepath.Join(h.Dir(), "incus/instances", vm, "rootfs", path))))
	}

	// The canaries: the runbook's registration secret, the old signing
	// key; the Samba hashes are added once pulled.
	ids, err := age.ParseIdentities(bytes.NewReader(must(os.ReadFile(identity))))
	if err != nil {
		t.Fatal(err)
	}
	autoVars := must(agefile.Decrypt(must(os.ReadFile(filepath.Join(dir, "secrets.auto.hcl.age"))), ids...))
	regSecret := regexp.MustCompile(`synapse_registration_secret = "([^"]+)"`).FindStringSubmatch(string(autoVars))[1]
	secrets := map[string]string{
		"the runbook's registration secret": regSecret,
		"the old signing key":               strings.Fields(rootfs("matrix", "/etc/matrix-synapse/homeserver.signing.key"))[2],
		"ana's Samba password":              labVar(h.Env(), "samba_check_password"),
	}

	var seen bytes.Buffer
	do := func(args ...string) string {
		out := run(t, dir, env, args...)
		seen.WriteString(out)
		return out
	}
	// The homeserver from the internet: nothing answers before the
	// ingress (the router's forward to the node goes nowhere).
	if code, body := homeserverGet(t, h, home.ClientVersionsPath); code == 200 {
		t.Errorf("the homeserver answered %s before ingress-matrix: %d %s", home.ClientVersionsPath, code, body)
	}
	for _, ph := range []string{"rehearsal", "platform", "data-apps", "host-services", "ingress-matrix", "cleanup"} {
		do("run", "--phase", ph, "--auto-approve", "--approve", "approval.dns")
	}
	// Through the forward and the ingress, the Synapse pod answers: the
	// version of its image, which only the pod knows.
	if code, body := homeserverGet(t, h, home.FederationPath); code != 200 || !strings.Contains(body, `"version":"`+incushost.DefaultSynapseVersion+`"`) {
		t.Errorf("the homeserver's %s after ingress-matrix: %d %s, want the Synapse pod's version %s", home.FederationPath, code, body, incushost.DefaultSynapseVersion)
	}
	if code, body := homeserverGet(t, h, home.ClientVersionsPath); code != 200 || !strings.Contains(body, `"versions":[`) {
		t.Errorf("the homeserver's %s after ingress-matrix: %d %s", home.ClientVersionsPath, code, body)
	}
	if want := "copied with Synapse's Python (sqlite3 backup)"; !strings.Contains(seen.String(), want) {
		t.Errorf("the Synapse export does not say %q (the old VM has no sqlite3)", want)
	}
	// A moved account logs in to the new Samba with its old password and
	// opens the share only the accounts may.
	if want := ":445 opened media as ana: "; !strings.Contains(seen.String(), want) {
		t.Errorf("host-services' smb_check does not say %q", want)
	}

	// Synapse's configuration, in the Secret its release mounts at /config:
	// homeserver.yaml and conf.d merged, rewritten for the pod.
	kubeconfig := openKubeconfig(t, dir)
	config := secretData(t, kubeconfig, "matrix", "synapse-config")
	hs := config["homeserver.yaml"]
	for _, want := range []string{"\n    database: /data/homeserver.db\n", "\nmedia_store_path: /data/media\n", "\nsigning_key_path: /keys/homeserver.signing.key\n",
		"\npid_file: /data/homeserver.pid\n", "    bind_addresses: ['0.0.0.0']\n", "\nregistration_shared_secret_path: /config/registration_shared_secret\n",
		"\nserve_server_wellknown: true\n", "\nserver_name: " + home.MatrixDomain + "\n", "\nreport_stats: false\n"} {
		if !strings.Contains(hs, want) {
			t.Errorf("the Secret's homeserver.yaml lacks %q:\n%s", want, hs)
		}
	}
	for _, line := range strings.Split(hs, "\n") {
		if setting, _, _ := strings.Cut(line, "#"); strings.Contains(setting, "/var/lib/matrix-synapse") || strings.Contains(setting, "/etc/matrix-synapse") ||
			strings.Contains(setting, "/var/log/matrix-synapse") || strings.Contains(setting, "registration_shared_secret:") {
			t.Errorf("the Secret's homeserver.yaml keeps %q", line)
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
	for _, want := range []string{`{"name":"SYNAPSE_CONFIG_PATH","value":"/config/homeserver.yaml"}`, `"secretName":"synapse-config"`, `"mountPath":"/config"`,
		`"image":"matrixdotorg/synapse:v` + incushost.DefaultSynapseVersion + `"`} {
		if !strings.Contains(deploy, want) {
			t.Errorf("Synapse's Deployment lacks %s:\n%s", want, deploy)
		}
	}

	// Samba's accounts: sealed on disk, whole in the Secret the new Samba
	// mounts; their NT hashes are canaries from now on.
	users := string(must(agefile.Decrypt(must(os.ReadFile(filepath.Join(dir, "secrets/samba-users.age"))), ids...)))
	for _, line := range strings.Split(strings.TrimSpace(users), "\n") {
		if f := strings.Split(line, ":"); len(f) > 3 && len(f[3]) == 32 {
			secrets["the NT hash of "+f[0]] = f[3]
		}
	}
	if secrets["the NT hash of ana"] == "" || secrets["the NT hash of ben"] == "" {
		t.Errorf("the pulled Samba accounts are not pdbedit -L -w's lines for ana and ben:\n%d lines", strings.Count(users, "\n"))
	}
	if got := secretData(t, kubeconfig, "files", "samba-users")["smbpasswd"]; got != users {
		t.Error("the Secret files/samba-users does not hold the accounts pulled from the old VM")
	}
	if got := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/files/deployments/samba"); !strings.Contains(got, `"secretName":"samba-users"`) {
		t.Errorf("the Samba Deployment does not mount the Secret samba-users:\n%s", got)
	}

	// Jellyfin's and Frigate's data, where their releases mount it, with
	// hardware decoding on in the copies, never in the old VM's files.
	for path, want := range map[string]string{
		"apps/jellyfin/data/jellyfin.db":                      "ana",
		"apps/jellyfin/data/library.db":                       "/var/mnt/data/media/movies/",
		"apps/jellyfin/config/system.xml":                     "<IsStartupWizardCompleted>true</IsStartupWizardCompleted>",
		"apps/jellyfin/config/encoding.xml":                   "<HardwareAccelerationType>vaapi</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>",
		"apps/jellyfin/root/default/Movies/options.xml":       "<Path>/var/mnt/data/media/movies</Path>",
		"apps/jellyfin/metadata/library/ab/abcdef/poster.jpg": "a poster",
		"apps/frigate/config.yml":                             "\nffmpeg:\n  hwaccel_args: preset-vaapi\n",
		"apps/frigate/frigate.db":                             "driveway",
	} {
		if b, err := os.ReadFile(filepath.Join(h.DataDir(), path)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("the data volume's %s: %q, %v; want it to hold %q", path, b, err, want)
		}
	}
	if enc, cfg := rootfs("services", "/etc/jellyfin/encoding.xml"), rootfs("services", "/opt/frigate/config/config.yml"); !strings.Contains(enc, ">none<") || strings.Contains(cfg, "hwaccel") {
		t.Errorf("the old VM's own settings were changed:\n%s\n%s", enc, cfg)
	}
	for release, mounts := range map[string][]string{
		"jellyfin": {`"hostPath":{"path":"/var/mnt/data/apps/jellyfin","type":"Directory"}`, `{"name":"library-0","readOnly":true,"mountPath":"/var/mnt/data/media"}`,
			`"image":"jellyfin/jellyfin:` + incushost.DefaultJellyfinVersion + `"`},
		"frigate": {`"hostPath":{"path":"/var/mnt/data/apps/frigate","type":"Directory"}`},
	} {
		got := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/media/deployments/"+release)
		for _, mount := range mounts {
			if !strings.Contains(got, mount) {
				t.Errorf("the Deployment %s lacks %s:\n%s", release, mount, got)
			}
		}
	}

	do("rollback", "--auto-approve")
	if code, body := homeserverGet(t, h, home.ClientVersionsPath); code == 200 {
		t.Errorf("the homeserver still answers %s through the node after the rollback removed the ingress: %s", home.ClientVersionsPath, body)
	}

	// The old services: each stopped before its data was copied (the old
	// Samba before the new one was installed), started again by the
	// rollback after the copy was removed.
	events, err := home.ReadEvents(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, e := range events {
		if e.Kind == home.EventExec && e.Instance == "services" {
			switch cmd := strings.Join(e.Command, " "); {
			case strings.HasPrefix(cmd, "systemctl stop "), strings.HasPrefix(cmd, "systemctl start "):
				services = append(services, strings.TrimPrefix(cmd, "systemctl "))
			case strings.HasPrefix(cmd, "docker compose -p frigate "):
				services = append(services, strings.TrimPrefix(cmd, "docker compose -p "))
			case strings.Contains(cmd, "touch /root/.jellyfin-exported"):
				services = append(services, "export jellyfin")
			case strings.Contains(cmd, "touch /root/.frigate-exported"):
				services = append(services, "export frigate")
			case strings.Contains(cmd, "pdbedit -L -w"):
				services = append(services, "export smbd")
			}
		}
	}
	index := func(s string) int { return slices.Index(services, s) }
	for _, app := range []string{"jellyfin", "frigate", "smbd"} {
		stop, export, start := index("stop "+app), index("export "+app), index("start "+app)
		if app == "frigate" {
			stop, start = index("frigate stop"), index("frigate start")
		}
		if stop < 0 || export < stop || start < export {
			t.Errorf("%s in the old services VM: %v, want stopped, then exported, then started again", app, services)
		}
	}
	for what, argv := range map[string][]string{
		"jellyfin": {"systemctl", "is-active", "jellyfin"},
		"smbd":     {"systemctl", "is-active", "smbd"},
		"frigate":  {"sh", "-c", `docker compose ls --format json | grep -q '"Name": *"frigate", *"Status": *"running'`},
	} {
		if code := labExec(t, h, "services", argv...); code != 0 {
			t.Errorf("%s is not running in the old services VM after the rollback: %v exited %d", what, argv, code)
		}
	}
	if code := labExec(t, h, "matrix", "systemctl", "is-active", "matrix-synapse"); code != 0 {
		t.Errorf("Synapse is not active in the old matrix VM after the rollback: exited %d", code)
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

// labVar is the example's variable name as the lab's Env sets it.
func labVar(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MIGRATE_VAR_"+name+"="); ok {
			return v
		}
	}
	return ""
}

// homeserverGet asks the lab's homeserver endpoint (matrix_url) for path,
// trusting the lab's Matrix CA only.
func homeserverGet(t *testing.T, h *home.Home, path string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(must(os.ReadFile(h.MatrixCA()))) {
		t.Fatal("the lab's Matrix CA holds no certificate")
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(h.MatrixURL() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
