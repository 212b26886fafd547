package examples

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

// ageRunbook takes a token from an encrypted variables file beside it and
// more environment from an encrypted values file, neither marked
// sensitive anywhere in the runbook.
const ageRunbook = `
variable "kubeconfig" { type = string }
variable "ns" { type = string }
variable "api_token" { type = string }

provider "helm" "cluster" {
  kubeconfig = var.kubeconfig
}

phase "apps" {
  step "kubernetes_namespace" "web" {
    name         = var.ns
    pod_security = "baseline"
  }

  step "helm_release" "web" {
    chart        = "charts/app"
    namespace    = var.ns
    values_files = ["secret-values.yaml.age"]
    values       = { env = { API_TOKEN = var.api_token } }
    depends_on   = [kubernetes_namespace.web]
  }
}
`

// TestAgeSecretsThroughThePlugin: an encrypted variables file beside the
// runbook and an encrypted values file, opened by migrate and by the helm
// program with --age-identity, reach the cluster; their canaries appear
// in no plan, output, state, journal or log.
func TestAgeSecretsThroughThePlugin(t *testing.T) {
	t.Parallel()
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig" // where scripts/kube-up.sh writes it
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("no kubeconfig (%v): start the API server with scripts/kube-up.sh (make test does)", err)
	}
	const varCanary, valuesCanary = "CANARY-var-9Rk2Pq7", "CANARY-values-4Tz8Wm3"
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "key.txt")
	dir := t.TempDir()
	copyTracked(t, "../../examples/homelab/charts", filepath.Join(dir, "charts"))
	seal := func(name, clear string) {
		b, err := agefile.Encrypt([]byte(clear), true, id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seal("secrets.auto.hcl.age", "api_token = \""+varCanary+"\"\n")
	seal("secret-values.yaml.age", "env:\n  DB_PASSWORD: "+valuesCanary+"\n")
	for name, text := range map[string]string{"main.hcl": ageRunbook, agefile.RecipientsFile: id.Recipient().String() + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns := "mt-age-" + hex.EncodeToString(b)
	args := []string{"--age-identity", keyFile, "--var", "kubeconfig=" + kubeconfig, "--var", "ns=" + ns}
	env := []string{"MIGRATE_AGE_IDENTITY="}

	var outs []string
	outs = append(outs, run(t, dir, env, append([]string{"plan", "--out", filepath.Join(dir, "plan.json")}, args...)...))
	outs = append(outs, run(t, dir, env, append([]string{"run", "--plan", filepath.Join(dir, "plan.json"), "--log-level", "debug"}, args...)...))
	// The values reached the cluster, decrypted.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	dep, err := client.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		got[e.Name] = e.Value
	}
	if got["API_TOKEN"] != varCanary || got["DB_PASSWORD"] != valuesCanary {
		t.Errorf("the Deployment's env = %v, want the decrypted values", got)
	}
	outs = append(outs,
		run(t, dir, env, append([]string{"plan", "--json"}, args...)...),
		run(t, dir, env, "status", "--json"),
		run(t, dir, env, "state", "show", "--json"),
		run(t, dir, env, append([]string{"rollback", "--auto-approve"}, args...)...),
	)
	if !strings.Contains(outs[0], "(sensitive value)") {
		t.Errorf("the plan redacts nothing:\n%s", outs[0])
	}
	for _, out := range outs {
		if strings.Contains(out, "CANARY") {
			t.Errorf("a canary leaked into the output:\n%s", out)
		}
	}
	files := []string{filepath.Join(dir, "plan.json")}
	filepath.WalkDir(filepath.Join(dir, ".migrate"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 3 {
		t.Errorf("want the plan, the state and the logs: %v", files)
	}
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte("CANARY")) {
			t.Errorf("a canary leaked into %s", f)
		}
	}
}
