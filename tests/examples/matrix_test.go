package examples

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestHomelabMatrixMove runs the Matrix move of examples/homelab — its
// ingress-matrix phase, as the example has it — against the real Incus
// daemon and the real API server (scheduler and kwok included): Synapse
// stopped in the old instance, its database and media exported once and
// pulled onto the data share, its signing key pulled straight into an age
// file and made a Secret, the restore Job completed, the release ready,
// the Ingress applied, the old instance stopped with a snapshot; then
// rollback brings the old instance back with Synapse running.
//
// The other phases target a Talos node, which does not run here, so the
// test keeps the one phase and drops the talos provider (keepPhases). The
// old "VM" is a busybox container laid out as Debian's matrix-synapse
// package lays it out: systemctl is a stand-in that records what it was
// asked, and there is no sqlite3 (nor Synapse's Python): the database is
// copied as a file, Synapse stopped.
func TestHomelabMatrixMove(t *testing.T) {
	t.Parallel()
	kubeconfig := labKubeconfig(t)
	dir := copyExample(t, "homelab")
	keepPhases(t, filepath.Join(dir, "main.hcl"), "ingress-matrix")
	// The namespaces of an earlier run's rollback may still be terminating:
	// objects made in them now would vanish with them.
	for _, ns := range []string{"matrix", "ingress"} {
		deadline := time.Now().Add(5 * time.Minute)
		for strings.Contains(kubectlJSON(t, kubeconfig, "/api/v1/namespaces/"+ns), `"phase":"Terminating"`) {
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s of an earlier run is still terminating after 5m", ns)
			}
			time.Sleep(time.Second)
		}
	}
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sealKubeconfig(t, dir, kc)

	signingKey := "ed25519 a_mtst " + canary(t) // the homeserver's identity: a canary
	ids, err := age.ParseIdentities(bytes.NewReader(must(os.ReadFile(filepath.Join(dir, "secrets/demo-identity.txt")))))
	if err != nil {
		t.Fatal(err)
	}
	// Synapse's registration secret comes from the example's encrypted
	// variables file, read automatically beside the runbook.
	autoVars, err := agefile.Decrypt(must(os.ReadFile(filepath.Join(dir, "secrets.auto.hcl.age"))), ids...)
	if err != nil {
		t.Fatal(err)
	}
	regSecret := regexp.MustCompile(`synapse_registration_secret = "([^"]+)"`).FindStringSubmatch(string(autoVars))[1]
	macaroon := "mac" + canary(t) // a secret of the old homeserver.yaml, carried over
	vm := oldMatrix(t, signingKey, macaroon)
	// The data volume, a custom volume of the daemon's pool (IncusOS's
	// tank/data in the example): the export lands in it.
	volume := "mt-data-" + hex.EncodeToString(must(randomBytes(4)))
	incusOut(t, "storage", "volume", "create", "default", volume)
	t.Cleanup(func() { exec.Command("incus", "storage", "volume", "delete", "default", volume).Run() })
	share := "/var/lib/incus/storage-pools/default/custom/default_" + volume // the dir driver's layout
	// The homeserver from the internet: TLS, from a CA only the runbook
	// names (httptest's certificate is its own CA).
	federation := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_matrix/federation/v1/version":
			w.Write([]byte(`{"server":{"name":"Synapse","version":"1.120.0"}}`))
		case "/_matrix/client/versions": // the phase's last check, as the new Synapse answers it
			w.Write([]byte(`{"versions":["v1.11"],"unstable_features":{}}`))
		case "/.well-known/matrix/server":
			w.Write([]byte(`{"m.server":"matrix.example.org:443"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(federation.Close)
	ca := filepath.Join(t.TempDir(), "matrix-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: federation.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}

	// The same certificate for the ingress's synapse-tls Secret.
	tlsCert, tlsKey := filepath.Join(t.TempDir(), "tls.crt"), filepath.Join(t.TempDir(), "tls.key")
	keyDER, err := x509.MarshalPKCS8PrivateKey(federation.TLS.Certificates[0].PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tlsCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: federation.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tlsKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}

	env := []string{agefile.IdentityEnv + "=" + filepath.Join(dir, "secrets/demo-identity.txt")}
	flags := []string{"--var", "matrix_vm=" + vm, "--var", "incus_remote=local", "--var", "data_pool=default", "--var", "data_volume=" + volume,
		"--var", "matrix_url=" + federation.URL, "--var", "matrix_ca=" + ca, "--var", "matrix_tls_cert=" + tlsCert, "--var", "matrix_tls_key=" + tlsKey}
	var seen bytes.Buffer // everything migrate printed
	do := func(args ...string) string {
		out := run(t, dir, env, append(args, flags...)...)
		seen.WriteString(out)
		return out
	}

	plan := do("plan")
	for _, want := range []string{"incus_exec.stop_synapse", "incus_device.matrix_data", "incus_file.signing_key", "kubernetes_secret.signing_key",
		"incus_exec.synapse_config", "incus_file.synapse_config", "kubernetes_secret.synapse_config", "+ Secret matrix/synapse-config (keys: homeserver.yaml, registration_shared_secret)",
		"kubernetes_manifest.synapse_storage", "kubernetes_job.restore_synapse", "helm_release.synapse", "kubernetes_manifest.ingress"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %s:\n%s", want, plan)
		}
	}
	t.Cleanup(func() { // whatever happened, the cluster objects of the run go
		exec.Command(migrate, append([]string{"rollback", "--auto-approve", "--runbook", dir}, flags...)...).Run()
	})
	start := time.Now()
	do("run", "--phase", "ingress-matrix", "--auto-approve", "--approve", "approval.dns")
	t.Logf("run: %s", time.Since(start))

	// The old instance: Synapse stopped, then the instance stopped with a
	// snapshot; the export made once.
	if got := incusOut(t, "list", vm, "--format", "csv", "--columns", "s"); strings.TrimSpace(got) != "STOPPED" {
		t.Errorf("the old matrix instance after the run: %q", got)
	}
	if got := incusOut(t, "snapshot", "list", vm, "--format", "csv"); !strings.Contains(got, "migrate-") {
		t.Errorf("no snapshot was taken before the stop: %q", got)
	}
	// The data volume: the database and the media store, as exported; the
	// volume is detached again by the rollback only.
	if b, err := os.ReadFile(filepath.Join(share, "matrix/homeserver.db")); err != nil || string(b) != "SQLite format 3\x00 the rooms\n" {
		t.Errorf("the database on the share: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(share, "matrix/media.tar")); err != nil {
		t.Errorf("the media store on the share: %v", err)
	}
	if want := "copied the file (no sqlite3 here; Synapse is stopped)"; !strings.Contains(seen.String(), want) {
		t.Errorf("the export does not say how it copied the database (%q)", want)
	}
	// The signing key: only encrypted on disk, and the Secret holds it.
	sealed, err := os.ReadFile(filepath.Join(dir, "secrets/synapse-signing.key.age"))
	if err != nil || !agefile.IsEncrypted(sealed) {
		t.Fatalf("the pulled signing key is not an age file: %v", err)
	}
	if clear, err := agefile.Decrypt(sealed, ids...); err != nil || string(clear) != signingKey+"\n" {
		t.Errorf("the signing key decrypts to %q, %v", clear, err)
	}
	if got := kubectlJSON(t, kubeconfig, "/api/v1/namespaces/matrix/secrets/synapse-signing-key"); !strings.Contains(got, `"homeserver.signing.key"`) {
		t.Errorf("the Secret: %s", got)
	}
	// Synapse's configuration: the old one, its paths the pod's, in the
	// Secret the release mounts at /config, beside the runbook's
	// registration secret; on disk only in an age file.
	config := secretData(t, kubeconfig, "matrix", "synapse-config")
	hs := config["homeserver.yaml"]
	for _, want := range []string{"\n    database: /data/homeserver.db\n", "\nmedia_store_path: /data/media\n", "\nsigning_key_path: /keys/homeserver.signing.key\n",
		"\nregistration_shared_secret_path: /config/registration_shared_secret\n", "\nserve_server_wellknown: true\n", `macaroon_secret_key: "` + macaroon + `"`, "\nserver_name: matrix.example.org\n", "\nreport_stats: false\n"} {
		if !strings.Contains(hs, want) {
			t.Errorf("the Secret's homeserver.yaml lacks %q:\n%s", want, hs)
		}
	}
	if settings := regexp.MustCompile(`(?m)^[^#\n]*`).FindAllString(hs, -1); slices.ContainsFunc(settings, func(l string) bool {
		return strings.Contains(l, "/var/lib/matrix-synapse") || strings.Contains(l, "/etc/matrix-synapse") || strings.Contains(l, "registration_shared_secret:")
	}) {
		t.Errorf("the Secret's homeserver.yaml keeps the old VM's paths or its registration secret:\n%s", hs)
	}
	if config["registration_shared_secret"] != regSecret {
		t.Error("the Secret's registration_shared_secret is not the runbook's")
	}
	if sealed, err := os.ReadFile(filepath.Join(dir, "secrets/synapse-homeserver.yaml.age")); err != nil || !agefile.IsEncrypted(sealed) {
		t.Errorf("the pulled homeserver.yaml is not an age file: %v", err)
	}
	deploy := kubectlJSON(t, kubeconfig, "/apis/apps/v1/namespaces/matrix/deployments/synapse")
	for _, want := range []string{`{"name":"SYNAPSE_CONFIG_PATH","value":"/config/homeserver.yaml"}`, `"secretName":"synapse-config"`, `"mountPath":"/config"`} {
		if !strings.Contains(deploy, want) {
			t.Errorf("the Deployment lacks %s:\n%s", want, deploy)
		}
	}
	for path, want := range map[string]string{
		"/apis/batch/v1/namespaces/matrix/jobs/synapse-restore":          `"type":"Complete","status":"True"`,
		"/apis/apps/v1/namespaces/matrix/deployments/synapse":            `"type":"Available","status":"True"`,
		"/api/v1/namespaces/matrix/persistentvolumeclaims/synapse-data":  `"phase":"Bound"`,
		"/apis/networking.k8s.io/v1/namespaces/matrix/ingresses/synapse": `"host":"matrix.example.org"`,
	} {
		if got := kubectlJSON(t, kubeconfig, path); !strings.Contains(got, want) {
			t.Errorf("%s lacks %s:\n%s", path, want, got)
		}
	}
	// Run again: nothing to do, nothing exported or restored twice.
	if out := do("plan"); !strings.Contains(out, "0 to create, 0 to update, 0 drifted") {
		t.Errorf("a plan after the run:\n%s", out)
	}

	start = time.Now()
	rb := do("rollback", "--auto-approve")
	t.Logf("rollback: %s", time.Since(start))
	// The DNS switch was made by hand: the rollback says to switch it back.
	if want := "Point matrix.example.org back at the old matrix VM"; !strings.Contains(strings.Join(strings.Fields(rb), " "), want) {
		t.Errorf("the rollback does not ask to switch DNS back (%q):\n%s", want, rb)
	}
	if got := incusOut(t, "list", vm, "--format", "csv", "--columns", "s"); strings.TrimSpace(got) != "RUNNING" {
		t.Errorf("the old matrix instance after rollback: %q", got)
	}
	if got := incusOut(t, "exec", vm, "--", "cat", "/root/synapse.state"); strings.TrimSpace(got) != "running" {
		t.Errorf("Synapse in the old instance after rollback: %q", got)
	}
	if got := incusOut(t, "exec", vm, "--", "cat", "/root/systemctl.calls"); strings.TrimSpace(got) != "stop matrix-synapse\nstart matrix-synapse" {
		t.Errorf("systemctl was called: %q (once stop, once start)", got)
	}
	for _, f := range []string{"secrets/synapse-signing.key.age", "secrets/synapse-homeserver.yaml.age"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("rollback left the pulled %s: %v", f, err)
		}
	}
	if got := incusOut(t, "exec", vm, "--", "sh", "-c", "ls /root/migrate 2>&1 || true"); !strings.Contains(got, "No such file") {
		t.Errorf("rollback left the rewritten configuration in the old instance: %q", got)
	}
	if _, err := os.Stat(filepath.Join(share, "matrix")); !os.IsNotExist(err) {
		t.Errorf("rollback left the export on the share: %v", err)
	}
	if got := kubectlJSON(t, kubeconfig, "/api/v1/persistentvolumes/synapse-data"); got != "" && !strings.Contains(got, `"deletionTimestamp"`) {
		t.Errorf("rollback left the volume: %s", got)
	}
	if got := kubectlJSON(t, kubeconfig, "/api/v1/namespaces/matrix"); got != "" && !strings.Contains(got, `"phase":"Terminating"`) {
		t.Errorf("rollback left the namespace: %s", got)
	}

	// The canaries: in nothing migrate printed or left on disk.
	for _, c := range []string{signingKey, regSecret, macaroon} {
		if strings.Contains(seen.String(), c) {
			t.Errorf("a secret reached the terminal")
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && bytes.Contains(must(os.ReadFile(p)), []byte(c)) {
				t.Errorf("a secret is in clear in %s", p)
			}
			return nil
		})
	}
}

// keepPhases rewrites a runbook file to keep only the named phases, and
// nothing of Talos: no talos provider, no talos_* step or check in the
// phases kept (the lab's Talos node is not part of these tests), and no
// role or service (they name steps of the phases left out).
func keepPhases(t *testing.T, path string, keep ...string) {
	t.Helper()
	f, diags := hclwrite.ParseConfig(must(os.ReadFile(path)), path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	body := f.Body()
	for _, b := range slices.Clone(body.Blocks()) {
		l := b.Labels()
		switch {
		case b.Type() == "phase" && !slices.Contains(keep, l[0]), b.Type() == "provider" && l[0] == "talos",
			b.Type() == "role", b.Type() == "service": // they name steps of the phases left out
			body.RemoveBlock(b)
		case b.Type() == "phase":
			for _, s := range slices.Clone(b.Body().Blocks()) {
				if (s.Type() == "step" || s.Type() == "check") && strings.HasPrefix(s.Labels()[0], "talos_") {
					b.Body().RemoveBlock(s)
				}
			}
		}
	}
	if err := os.WriteFile(path, f.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The moved blocks beside it name steps of the phases left out.
	if err := os.Remove(filepath.Join(filepath.Dir(path), "moved.hcl")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// oldMatrix launches the stand-in of the old matrix VM: Synapse's files
// where Debian's package keeps them (server_name and report_stats in
// conf.d, the macaroon key in a conf.d file of its own), a systemctl
// stand-in, and no sqlite3 (Debian only suggests it).
func oldMatrix(t *testing.T, signingKey, macaroon string) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "mt-matrix-" + hex.EncodeToString(b)
	incusOut(t, "launch", image(), name)
	t.Cleanup(func() { exec.Command("incus", "delete", "--force", name).Run() })
	files := map[string]struct {
		body string
		mode string
	}{
		"/var/lib/matrix-synapse/homeserver.db":      {"SQLite format 3\x00 the rooms\n", "0600"},
		"/var/lib/matrix-synapse/media/local/ab/cd":  {"a picture\n", "0600"},
		"/etc/matrix-synapse/homeserver.signing.key": {signingKey + "\n", "0600"},
		// Debian's: no server_name, report_stats nor registration secret
		// in it; server_name and report_stats in conf.d, as the package's
		// debconf writes them, and a secret an admin added there.
		"/etc/matrix-synapse/homeserver.yaml": {"# This is set in /etc/matrix-synapse/conf.d/server_name.yaml for Debian installations.\n# server_name: \"SERVERNAME\"\npid_file: \"/var/run/matrix-synapse.pid\"\nlisteners:\n  - port: 8008\n    type: http\n    x_forwarded: true\n    bind_addresses: ['::1', '127.0.0.1']\n    resources:\n      - names: [client, federation]\n" +
			"database:\n  name: sqlite3\n  args:\n    database: /var/lib/matrix-synapse/homeserver.db\nlog_config: \"/etc/matrix-synapse/log.yaml\"\nmedia_store_path: /var/lib/matrix-synapse/media\n" +
			"signing_key_path: \"/etc/matrix-synapse/homeserver.signing.key\"\ntrusted_key_servers:\n  - server_name: \"matrix.org\"\n", "0644"},
		"/etc/matrix-synapse/conf.d/server_name.yaml":  {"# This file is autogenerated, and will be recreated on upgrade if it is deleted.\n# Any changes you make will be preserved.\n\n# The domain name of the server, with optional explicit port.\nserver_name: matrix.example.org\n", "0644"},
		"/etc/matrix-synapse/conf.d/report_stats.yaml": {"# This file is autogenerated, and will be recreated on upgrade if it is deleted.\n\n# Whether to report homeserver usage statistics.\nreport_stats: false\n", "0644"},
		"/etc/matrix-synapse/conf.d/secrets.yaml":      {"macaroon_secret_key: \"" + macaroon + "\"\n", "0600"},
		"/root/synapse.state":                          {"running\n", "0644"},
		"/bin/systemctl": {"#!/bin/sh\n# stand-in for systemd: records the calls and the one service's state\n" +
			"echo \"$*\" >> /root/systemctl.calls\n" +
			"case \"$1\" in stop) echo stopped > /root/synapse.state;; start) echo running > /root/synapse.state;; esac\n", "0755"},
	}
	for path, f := range files {
		src := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(src, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		incusOut(t, "file", "push", "-p", "--mode", f.mode, src, name+path)
	}
	return name
}

func image() string {
	if v := os.Getenv("INCUS_TEST_IMAGE"); v != "" {
		return v
	}
	return "migrate-busybox"
}

// incusOut runs the incus CLI against the daemon of scripts/incus-up.sh.
func incusOut(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "incus", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("incus %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectlJSON GETs an API path with the kubeconfig's credentials; the
// JSON comes back without spaces or newlines, for plain matching. A
// missing object is "" (rollback checks ask for those).
func kubectlJSON(t *testing.T, kubeconfig, path string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := cs.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, out)
	}
	return strings.NewReplacer(" ", "", "\n", "").Replace(string(out))
}

// labKubeconfig is the kubeconfig scripts/kube-up.sh writes.
func labKubeconfig(t *testing.T) string {
	t.Helper()
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig"
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("no kubeconfig (%v): start the API server with scripts/kube-up.sh (make test does)", err)
	}
	return kubeconfig
}

func canary(t *testing.T) string {
	b := make([]byte, 12)
	rand.Read(b)
	return "cnry" + hex.EncodeToString(b)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := rand.Read(b)
	return b, err
}

// secretData is a Secret's data, decoded.
func secretData(t *testing.T, kubeconfig, namespace, name string) map[string]string {
	t.Helper()
	var sec struct{ Data map[string]string }
	if err := json.Unmarshal([]byte(kubectlJSON(t, kubeconfig, "/api/v1/namespaces/"+namespace+"/secrets/"+name)), &sec); err != nil {
		t.Fatalf("the Secret %s/%s: %v", namespace, name, err)
	}
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(must(base64.StdEncoding.DecodeString(v)))
	}
	return out
}
