package incus_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/state"
)

var factories = map[string]providers.Factory{"local": local.Factory, "incus": incus.Factory}

// loadFixture loads testdata/runbook with the given variables.
func loadFixture(t testing.TB, vars ...string) *phases.Runbook {
	t.Helper()
	return loadRunbook(t, "testdata/runbook", vars...)
}

// loadRunbook loads the runbook in dir with the given variables.
func loadRunbook(t testing.TB, dir string, vars ...string) *phases.Runbook {
	t.Helper()
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]phases.Schema{}
	for name, f := range factories {
		schemas[name] = f().Schema()
	}
	rb, diags := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{Dir: dir, Schemas: schemas, Vars: vars}).Load()
	if diags.HasErrors() {
		t.Fatalf("the fixture runbook has errors: %v", diags)
	}
	return rb
}

// migration is one `migrate` process: an engine over a locked state.
func migration(t testing.TB, rb *phases.Runbook, stateDir string) (*engine.Engine, func()) {
	t.Helper()
	st, err := state.Open(stateDir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e, diags := engine.New(context.Background(), engine.Options{Runbook: rb, Factories: factories, State: st})
	if diags.HasErrors() {
		st.Close()
		t.Fatal(diags.Err())
	}
	return e, func() { e.Close(); st.Close() }
}

func runPhase(t testing.TB, rb *phases.Runbook, stateDir, phase string) (*engine.Plan, error) {
	t.Helper()
	e, done := migration(t, rb, stateDir)
	defer done()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: []string{phase}})
	if diags.HasErrors() {
		return plan, diags.Err()
	}
	err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{})
	if err != nil {
		// Say why, not only which step.
		st, oerr := state.Open(stateDir, state.Options{})
		if oerr == nil {
			for addr, rec := range st.Snapshot().Steps {
				if rec.Status == state.Failed {
					err = fmt.Errorf("%w\n%s: %s", err, addr, rec.LastError)
				}
			}
			st.Close()
		}
	}
	return plan, err
}

func rollbackAll(t testing.TB, rb *phases.Runbook, stateDir string) *engine.RollbackPlan {
	t.Helper()
	e, done := migration(t, rb, stateDir)
	defer done()
	rp, err := e.PlanRollback(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Rollback(context.Background(), context.Background(), rp); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	return rp
}

// TestRunbookRunAndRollback runs the fixture through the engine: the old
// VMs are stopped with a snapshot and kept; a second run changes nothing;
// the cleanup is refused before retain_until; rollback starts them again.
func TestRunbookRunAndRollback(t *testing.T) {
	t.Parallel()
	c := client(t)
	home := launch(t, c, "home", true, map[string]string{"user.app": "jellyfin"})
	matrix := launch(t, c, "matrix", true, nil)
	rb := loadFixture(t, "home_vm="+home, "matrix_vm="+matrix)
	dir := t.TempDir()

	plan, err := runPhase(t, rb, dir, "retire")
	if err != nil {
		t.Fatalf("run retire: %v", err)
	}
	for _, sp := range plan.Phases[0].Steps {
		t.Logf("plan %s: %s\n%s", sp.Addr, sp.Action, sp.Diff)
	}
	for _, n := range []string{home, matrix} {
		i := inst(t, c, n)
		if i.Status != "Stopped" || i.Config[incus.KeyKeepForRollback] != "true" || len(snapshots(t, c, n)) != 1 {
			t.Fatalf("%s after retire: %s %v snapshots %v", n, i.Status, i.Config, snapshots(t, c, n))
		}
	}

	// Idempotent: a new plan of the same phase is a no-op.
	e, done := migration(t, rb, dir)
	again, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: []string{"retire"}})
	done()
	if diags.HasErrors() || again.HasChanges() {
		t.Fatalf("re-plan: %v changes=%v", diags.Err(), again.HasChanges())
	}

	// The cleanup is refused: the old VMs are kept until 2999-12-31.
	_, err = runPhase(t, rb, dir, "cleanup")
	if err == nil || !strings.Contains(err.Error(), "Instance Retained Until 2999-12-31") {
		t.Fatalf("cleanup before retain_until: %v", err)
	}

	// Something changes on the stopped home VM; rollback restores its
	// snapshot (restore_on_rollback) and starts both again.
	i := inst(t, c, home)
	put := i.Put()
	put.Config["user.app"] = "changed"
	if err := c.UpdateInstance(ctxT(t, 30*time.Second), home, put, ""); err != nil {
		t.Fatal(err)
	}
	rp := rollbackAll(t, rb, dir)
	for _, ph := range rp.Phases {
		for _, x := range ph.Revert {
			t.Logf("rollback %s: %s", x.Addr, x.Description)
		}
	}
	for _, n := range []string{home, matrix} {
		i := inst(t, c, n)
		if i.Status != "Running" {
			t.Errorf("%s after rollback: %s", n, i.Status)
		}
		if _, ok := i.Config[incus.KeyKeepForRollback]; ok {
			t.Errorf("%s keeps its mark after rollback", n)
		}
	}
	if v := inst(t, c, home).Config["user.app"]; v != "jellyfin" {
		t.Errorf("the home VM's snapshot was not restored: user.app = %q", v)
	}
}

// TestRunbookCrashResume kills (SIGKILL) a migrate process in the middle
// of a graceful stop; the next run observes the instance, redoes what is
// not done, and rollback then starts both old VMs again.
func TestRunbookCrashResume(t *testing.T) {
	t.Parallel()
	c := client(t)
	home := launch(t, c, "crash-home", true, slowStop) // ignores the shutdown signal
	matrix := launch(t, c, "crash-matrix", true, nil)
	vars := []string{"home_vm=" + home, "matrix_vm=" + matrix, "stop_timeout=4s"}
	dir := t.TempDir()

	killHelper(t, "TestHelperRunPhase", []string{"MIGRATE_INCUS_HELPER=" + dir, "MIGRATE_INCUS_HELPER_VARS=" + strings.Join(vars, ",")},
		30*time.Second, 500*time.Millisecond, "started the stop", func() bool {
			i := inst(t, c, home)
			return i.Config[incus.KeyStoppedBy] != "" && i.Status == "Running" // the marks are set just before the stop is sent
		})
	if i := inst(t, c, home); i.Status != "Running" {
		t.Fatalf("the stop finished before the kill (%s); the test proves nothing", i.Status)
	}

	rb := loadFixture(t, vars...)
	wantRunning(t, dir, phases.Address{Type: incus.InstanceState, Name: "old-home"}, "old-home")
	start := time.Now()
	plan, err := runPhase(t, rb, dir, "retire")
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	t.Logf("resumed run took %s", time.Since(start))
	for _, sp := range plan.Phases[0].Steps {
		t.Logf("resume plan %s: %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
	}
	for _, n := range []string{home, matrix} {
		if i := inst(t, c, n); i.Status != "Stopped" {
			t.Fatalf("%s after the resumed run: %s", n, i.Status)
		}
	}
	if n := len(snapshots(t, c, home)); n != 1 {
		t.Errorf("the resumed run took another snapshot: %v", snapshots(t, c, home))
	}
	rollbackAll(t, rb, dir)
	for _, n := range []string{home, matrix} {
		if i := inst(t, c, n); i.Status != "Running" {
			t.Errorf("%s after rollback: %s", n, i.Status)
		}
	}
}

// killHelper runs the test named run of this binary as a migrate process,
// with env added to its environment; once ready holds (checked every
// 20ms, for at most limit, else t fails: the helper never did what) and
// settle has passed, it kills the process (SIGKILL) and returns its
// output.
func killHelper(t *testing.T, run string, env []string, limit, settle time.Duration, what string, ready func() bool) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(limit)
	for !ready() {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the helper never %s:\n%s", what, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(settle)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return out.String()
}

// wantRunning fails t unless the state in dir holds the step at addr as
// running (a killed run's step); name names it in the message.
func wantRunning(t *testing.T, dir string, addr phases.Address, name string) {
	t.Helper()
	st, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := st.Step(addr)
	st.Close()
	if !ok || rec.Status != state.Running {
		t.Fatalf("the killed run left %s as %+v", name, rec)
	}
}

// TestHelperRunPhase is the migrate process TestRunbookCrashResume kills.
func TestHelperRunPhase(t *testing.T) {
	dir := os.Getenv("MIGRATE_INCUS_HELPER")
	if dir == "" {
		return // not a helper: nothing to do
	}
	rb := loadFixture(t, strings.Split(os.Getenv("MIGRATE_INCUS_HELPER_VARS"), ",")...)
	_, err := runPhase(t, rb, dir, "retire")
	fmt.Println("helper finished:", err)
	os.Exit(0)
}
