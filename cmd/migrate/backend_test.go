package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
