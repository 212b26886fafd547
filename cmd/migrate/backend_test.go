package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseBackend(t *testing.T) {
	t.Parallel()
	wd, _ := os.Getwd()
	b, err := parseBackend("etcd://127.0.0.1:2379,127.0.0.2:2379/migrate/homelab/?ca=/p/ca.pem&cert=c.pem&key=/p/k.pem&user=name&lock_ttl=30s", "--backend")
	if err != nil {
		t.Fatal(err)
	}
	if b.Type != "etcd" || !slices.Equal(b.Endpoints, []string{"127.0.0.1:2379", "127.0.0.2:2379"}) || b.Prefix != "migrate/homelab/" ||
		b.CA != "/p/ca.pem" || b.Cert != filepath.Join(wd, "c.pem") || b.Key != "/p/k.pem" || b.Username != "name" ||
		b.LockTTL != 30*time.Second || b.Password != "" {
		t.Errorf("%+v", b)
	}
	if b.Insecure {
		t.Error("insecure without being asked")
	}
	if b, err := parseBackend("etcd://u@h:1/p/?insecure=true", "x"); err != nil || !b.Insecure {
		t.Errorf("insecure=true: %+v %v", b, err)
	}
	if b, err := parseBackend("etcd://u@h:1/p/", "x"); err != nil || b.Username != "u" || b.Prefix != "p/" {
		t.Errorf("%+v %v", b, err)
	}
	if b, err := parseBackend("local", "x"); err != nil || b.Type != "local" || b.Path != "" {
		t.Errorf("%+v %v", b, err)
	}
	if b, err := parseBackend("local:st", "x"); err != nil || b.Type != "local" || b.Path != filepath.Join(wd, "st") {
		t.Errorf("%+v %v", b, err)
	}
	for url, want := range map[string]string{
		"etcd://u:s3cret-canary@h:1/p/":        "MIGRATE_ETCD_PASSWORD",
		"etcd://h:1/p/?password=s3cret-canary": "MIGRATE_ETCD_PASSWORD",
		"etcd://h:1":                           "no key prefix",
		"etcd://h:1,/p/":                       "empty endpoint",
		"etcd://h:1/p/?lock_ttl=10ms":          "at least 2s",
		"etcd://h:1/p/?cert=c.pem":             "both cert and key",
		"etcd://h:1/p/?colour=blue":            `unknown parameter "colour"`,
		"etcd://h:1/p/?insecure=maybe":         "want true or false",
		"consul://h:1/p/":                      `unknown backend "consul"`,
		"local:":                               "needs a directory",
	} {
		_, err := parseBackend(url, "--backend")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "--backend: ") {
			t.Errorf("%s: want an error with %q, got %v", url, want, err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-canary") {
			t.Errorf("%s: the error shows the password: %v", url, err)
		}
	}
}

// An etcd block nobody listens at: any command that used it would fail.
const deadEtcdBlock = `
variable "etcd_prefix" {}
backend "etcd" {
  endpoints = ["127.0.0.1:1"]
  prefix    = "migrate/${var.etcd_prefix}/"
}
`

// --backend and MIGRATE_BACKEND override the runbook's block; local:PATH
// puts the state where it says.
func TestBackendOverridesBlock(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases + deadEtcdBlock})
	elsewhere := filepath.Join(t.TempDir(), "st")
	run(t, dir, 0, "--backend", "local:"+elsewhere, "run", "--all", "--auto-approve", "--var", "etcd_prefix=x")
	if _, err := os.Stat(filepath.Join(elsewhere, "state.json")); err != nil {
		t.Errorf("--backend local:PATH: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".migrate", "state.json")); err == nil {
		t.Error("--backend local:PATH: the state was written beside the runbook too")
	}
	r := migrateEnv(t, dir, []string{"MIGRATE_BACKEND=local:" + elsewhere}, "status", "--json")
	expect(t, r, 0, "status")
	if !strings.Contains(r.stdout, `"status": "done"`) {
		t.Errorf("MIGRATE_BACKEND=local:PATH: status does not see the run: %s", r)
	}
	// --backend wins over MIGRATE_BACKEND.
	r = migrateEnv(t, dir, []string{"MIGRATE_BACKEND=etcd://127.0.0.1:1/p/"}, "--backend", "local:"+elsewhere, "state", "show", "--json")
	expect(t, r, 0, "state show")
	// A bad URL is named with where it came from.
	r = migrateEnv(t, dir, []string{"MIGRATE_BACKEND=etcd://u:s3cret-canary@127.0.0.1:1/p/"}, "status")
	expect(t, r, 1, "status")
	if !strings.Contains(r.stderr, "MIGRATE_BACKEND: the URL holds a password") || strings.Contains(r.stderr, "s3cret-canary") {
		t.Errorf("a URL with a password: %s", r)
	}
}

// status reads the block with its variables from the environment only;
// without them it says what is missing.
func TestBackendBlockNeedsItsVariables(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases + deadEtcdBlock})
	r := run(t, dir, 1, "status")
	if !strings.Contains(r.stderr, "backend block (main.hcl:") || !strings.Contains(r.stderr, "without a value for prefix") {
		t.Errorf("status: %s", r)
	}
}
