package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/homelab-migrate/migrate/tests/buildmigrate"
)

// fakeHelm is the helm program whose sum madeMigrate records; it is not
// put beside that migrate.
const fakeHelm = "#!/bin/sh\necho 'the helm program from PATH ran' >&2\nexit 1\n"

// made is migrate built as make build does (tests/buildmigrate), in a
// directory of its own beside the real talos program, whose sum it
// records (and fakeHelm's as the helm program's): built once, by the
// first test that needs it.
type made struct {
	dir, migrate, talos string
	sums                map[string]string
}

var (
	madeOnce sync.Once
	madeOut  made
	madeErr  error
)

func madeMigrate(t *testing.T) made {
	t.Helper()
	madeOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(bin), "made") // removed with bin's by TestMain
		if madeErr = os.Mkdir(dir, 0o755); madeErr != nil {
			return
		}
		sums, err := buildmigrate.Programs(dir, "migrate-provider-talos")
		if madeErr = err; err != nil {
			return
		}
		sums["migrate-provider-helm"] = sha256Hex(fakeHelm)
		madeErr = buildmigrate.Migrate(dir, sums)
		madeOut = made{dir: dir, migrate: filepath.Join(dir, "migrate"), talos: filepath.Join(dir, "migrate-provider-talos"), sums: sums}
	})
	if madeErr != nil {
		t.Fatalf("building migrate as make build does: %v", madeErr)
	}
	return madeOut
}

// lazyTalos is a runbook whose talos provider is configured from a step
// that has not run: its plan starts no program, and names it.
var lazyTalos = map[string]string{"main.hcl": `
provider "talos" "node" {
  version   = "v1.13.3"
  endpoints = ["10.0.0.${exec.boot.exit_code}"]
}
phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "talos_kubeconfig" "admin" { path = "kubeconfig.age" }
}
`}

// TestPlanNamesProgram: the plan names the program it would run, with
// its path and the start of its sha256, in text and in full in --json,
// said verified by a migrate built by make build, NOT VERIFIED by one
// built by go build, which runs only a program from $MIGRATE_PLUGIN_DIR.
func TestPlanNamesProgram(t *testing.T) {
	t.Parallel()
	m := madeMigrate(t)
	dir := runbook(t, lazyTalos)
	sum := m.sums["migrate-provider-talos"]
	r := migrateWith(t, m.migrate, dir, nil, "plan")
	expect(t, r, 0, "plan")
	if want := "talos: " + m.talos + " (sha256 " + sum[:12] + ", the one this migrate was built with)"; !strings.Contains(r.stdout, want) {
		t.Errorf("the plan does not name the program as %q: %s", want, r)
	}
	r = migrateWith(t, m.migrate, dir, nil, "plan", "--json")
	expect(t, r, 0, "plan", "--json")
	var plan struct {
		Programs []struct {
			Provider, Path, SHA256 string
			Verified               bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, r)
	}
	if len(plan.Programs) != 1 || plan.Programs[0].Provider != "talos" || plan.Programs[0].Path != m.talos || plan.Programs[0].SHA256 != sum || !plan.Programs[0].Verified {
		t.Errorf("plan --json programs: %+v", plan.Programs)
	}

	// go build's migrate: from $MIGRATE_PLUGIN_DIR only, said unverified.
	r = migrateWith(t, bin, dir, []string{"MIGRATE_PLUGIN_DIR=" + m.dir}, "plan")
	expect(t, r, 0, "plan")
	if want := "talos: " + m.talos + " (sha256 " + sum[:12] + ", NOT VERIFIED"; !strings.Contains(r.stdout, want) {
		t.Errorf("a build without sums does not say the program is unverified (%q): %s", want, r)
	}
	r = migrateWith(t, bin, dir, []string{"MIGRATE_PLUGIN_DIR="}, "plan")
	expect(t, r, 1, "plan")
	if said := strings.Join(strings.Fields(r.stderr), " "); !strings.Contains(said, "built without the sums") || !strings.Contains(said, "make build") {
		t.Errorf("a build without sums and no MIGRATE_PLUGIN_DIR: %s", r)
	}
}

// TestSecretsGenTalosRefusesTampered: a talos program that is not the one
// migrate was built with is refused before it runs and before anything is
// written, naming it, both sums and the fix.
func TestSecretsGenTalosRefusesTampered(t *testing.T) {
	t.Parallel()
	m := madeMigrate(t)
	plugins, ran := t.TempDir(), filepath.Join(t.TempDir(), "ran")
	tampered := "#!/bin/sh\ntouch " + ran + "\necho 'cluster: {}'\n"
	path := filepath.Join(plugins, "migrate-provider-talos")
	if err := os.WriteFile(path, []byte(tampered), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, _, _ := ageRunbook(t, nil)
	r := migrateWith(t, m.migrate, dir, []string{"MIGRATE_PLUGIN_DIR=" + plugins}, "secrets", "gen", "talos")
	expect(t, r, 1, "secrets", "gen", "talos")
	said := strings.Join(strings.Fields(r.stderr), " ") // the view wraps lines
	for _, want := range []string{path, m.sums["migrate-provider-talos"], sha256Hex(tampered), "make build"} {
		if !strings.Contains(said, want) {
			t.Errorf("the refusal lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the tampered program ran")
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets")); !os.IsNotExist(err) {
		t.Errorf("secrets gen talos wrote before refusing: %v", err)
	}
}

// TestProgramOnlyInPath: a program in PATH, even one with the recorded
// sum, is not run: version and a plan say where migrate looked and what
// to do.
func TestProgramOnlyInPath(t *testing.T) {
	t.Parallel()
	m := madeMigrate(t)
	inPath := t.TempDir()
	if err := os.WriteFile(filepath.Join(inPath, "migrate-provider-helm"), []byte(fakeHelm), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + inPath + string(os.PathListSeparator) + os.Getenv("PATH"), "MIGRATE_PLUGIN_DIR="}
	r := migrateWith(t, m.migrate, t.TempDir(), env, "version")
	expect(t, r, 0, "version")
	for _, want := range []string{"provider helm: not usable", "migrate does not look in PATH", "make build", "provider talos: " + m.talos} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version lacks %q: %s", want, r)
		}
	}
	dir := runbook(t, map[string]string{"main.hcl": `
phase "new" {
  step "kubernetes_secret" "key" {
    namespace = "matrix"
    name      = "signing-key"
    data      = { k = "v" }
  }
}
`})
	r = migrateWith(t, m.migrate, dir, env, "plan")
	expect(t, r, 1, "plan")
	if said := strings.Join(strings.Fields(r.stderr), " "); !strings.Contains(said, "migrate does not look in PATH") || strings.Contains(said, "the helm program from PATH ran") {
		t.Errorf("a plan with the helm program in PATH only: %s", r)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestSavedPlanKeepsItsPrograms: run --plan refuses, before any step runs,
// a saved plan made with another provider program than the one the run
// would start (here a build without sums, pointed at another directory).
func TestSavedPlanKeepsItsPrograms(t *testing.T) {
	t.Parallel()
	reviewed, other, ran := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "ran")
	for dir, body := range map[string]string{reviewed: "#!/bin/sh\n# reviewed\n", other: "#!/bin/sh\n# another\n"} {
		if err := os.WriteFile(filepath.Join(dir, "migrate-provider-talos"), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := runbook(t, map[string]string{"main.hcl": strings.Replace(lazyTalos["main.hcl"], `command = ["true"]`, `command = ["touch", "`+ran+`"]`, 1)})
	planFile := filepath.Join(t.TempDir(), "plan.json")
	r := migrateWith(t, bin, dir, []string{"MIGRATE_PLUGIN_DIR=" + reviewed}, "plan", "--out", planFile)
	expect(t, r, 0, "plan", "--out")
	r = migrateWith(t, bin, dir, []string{"MIGRATE_PLUGIN_DIR=" + other}, "run", "--plan", planFile, "--auto-approve")
	expect(t, r, 1, "run", "--plan")
	said := strings.Join(strings.Fields(r.stderr), " ")
	for _, want := range []string{"make a new plan", sha256Hex("#!/bin/sh\n# reviewed\n"), sha256Hex("#!/bin/sh\n# another\n"), "nothing was changed"} {
		if !strings.Contains(said, want) {
			t.Errorf("the refusal lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("a step ran under a plan made with another program")
	}
}
