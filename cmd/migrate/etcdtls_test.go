package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
)

// A password is refused over plaintext gRPC, from the runbook's block and
// from a URL alike, with what to do, and without showing it; insecure =
// true (or &insecure=true) accepts it, and every plan and run says so,
// in --json too.
func TestEtcdPasswordNeedsTLS(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, Auth: true})
	cfg := c.Config()
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(cfg, "migrate/plain/", "2s") + twoPhases})
	pw := []string{"MIGRATE_ETCD_PASSWORD=" + cfg.Password}
	url := etcdURL(cfg, "migrate/plain/")
	refusals := []result{
		run(t, dir, 1, "plan"),
		run(t, dir, 1, "run", "--all", "--auto-approve"),
		migrateEnv(t, dir, pw, "--backend", url, "plan"),
	}
	for _, r := range refusals {
		expect(t, r, 1, "a password over plaintext")
		for _, want := range []string{"password over plaintext gRPC", hosts(cfg)[0], "ca", "insecure = true", "&insecure=true"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the refusal does not say %q: %s", want, r)
			}
		}
		if strings.Contains(r.stdout+r.stderr, cfg.Password) {
			t.Errorf("the refusal shows the password: %s", r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "log.txt")); err == nil {
		t.Error("a step ran over a refused backend")
	}

	// Said so: accepted, with a warning in every plan.
	insecure := strings.Replace(etcdBlock(cfg, "migrate/plain/", "2s"), "lock_ttl", "insecure = true\n  lock_ttl", 1)
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(insecure+twoPhases), 0o644); err != nil {
		t.Fatal(err)
	}
	const warning = "without TLS (insecure = true)"
	r := run(t, dir, 0, "plan")
	if !strings.Contains(r.stderr, "Warning: ") || !strings.Contains(r.stderr, warning) || !strings.Contains(r.stderr, `password of user "migrate"`) {
		t.Errorf("plan does not warn of the plaintext backend: %s", r)
	}
	r = run(t, dir, 0, "plan", "--json")
	var doc struct {
		Warnings []string          `json:"warnings"`
		Phases   []json.RawMessage `json:"phases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Phases) != 2 {
		t.Fatalf("plan --json: %v: %s", err, r)
	}
	if len(doc.Warnings) != 1 || !strings.Contains(doc.Warnings[0], warning) {
		t.Errorf("plan --json carries no warning of the plaintext backend: %q", doc.Warnings)
	}
	r = run(t, dir, 0, "run", "--all", "--auto-approve", "--json")
	if !strings.Contains(r.stderr, warning) {
		t.Errorf("run --json does not warn of the plaintext backend: %s", r)
	}
	r = migrateEnv(t, dir, pw, "--backend", url+"&insecure=true", "plan")
	expect(t, r, 0, "plan with &insecure=true")
	if !strings.Contains(r.stderr, warning) {
		t.Errorf("plan over the URL with &insecure=true does not warn: %s", r)
	}
	for _, r := range []result{r, run(t, dir, 0, "status")} {
		if strings.Contains(r.stdout+r.stderr, cfg.Password) {
			t.Errorf("the password is shown: %s", r)
		}
	}
}
