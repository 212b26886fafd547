package incus_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/runbooks"
)

// readIn returns a file's content in an instance; "" when it is missing.
func readIn(t testing.TB, c *incusapi.Client, name, path string) string {
	t.Helper()
	_, r, _, err := c.GetFile(ctxT(t, 20*time.Second), name, path)
	if incusapi.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("GetFile %s:%s: %v", name, path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func list(v ...string) cty.Value {
	out := make([]cty.Value, len(v))
	for i, s := range v {
		out[i] = cty.StringVal(s)
	}
	return cty.ListVal(out)
}

// TestExec: env, cwd, user and group reach the command; its output is
// streamed to the log before it ends; the exit code is an output; a
// non-zero exit fails the step with the code and the last lines; creates
// skips it; the timeout fails it; rollback runs the revert command.
func TestExec(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "exec", true, nil)
	p := provider(t, nil)

	t.Run("env cwd user and revert", func(t *testing.T) {
		if err := c.PushFile(ctxT(t, 10*time.Second), name, "/tmp/w", incusapi.FilePut{Type: "directory", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
		s := newStep(t, p, incus.Exec, "run", map[string]cty.Value{
			"instance": str(name),
			"command":  list("sh", "-c", `echo "$GREETING from $(pwd) as $(id -u):$(id -g)" > w/out`),
			"env":      strMap(map[string]string{"GREETING": "hello world"}),
			"cwd":      str("/tmp"), "user": cty.NumberIntVal(1000), "group": cty.NumberIntVal(1001),
			"revert": list("rm", "w/out"),
		})
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, `+ run in instance "`+name+`": sh -c 'echo "$GREETING from $(pwd) as $(id -u):$(id -g)" > w/out'`, "env GREETING=hello world", "as 1000:1001", "in /tmp", "rollback: run rm w/out")
		r := s.mustApply(plan.Private, nil)
		if got := readIn(t, c, name, "/tmp/w/out"); got != "hello world from /tmp as 1000:1001\n" {
			t.Errorf("the command wrote %q", got)
		}
		if code := r.Outputs.GetAttr("exit_code"); !code.RawEquals(cty.NumberIntVal(0)) {
			t.Errorf("exit_code = %#v", code)
		}
		s.revert(r.Revert)
		if got := readIn(t, c, name, "/tmp/w/out"); got != "" {
			t.Errorf("the revert did not run: /tmp/w/out holds %q", got)
		}
	})

	t.Run("no revert", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "true", map[string]cty.Value{"instance": str(name), "command": list("true")})
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, "rollback: nothing to undo (no revert command)")
		r := s.mustApply(plan.Private, nil)
		s.revert(r.Revert)
	})

	t.Run("exit code", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "fails", map[string]cty.Value{"instance": str(name), "command": list("sh", "-c", "echo one; echo two >&2; exit 3")})
		r, _ := s.apply(ctxT(t, 60*time.Second), nil, nil)
		wantDiag(t, r.Diagnostics, "Command Failed", "incus_exec.fails", name, "exited with code 3", "one", "two")
		if code := r.Outputs.GetAttr("exit_code"); !code.RawEquals(cty.NumberIntVal(3)) {
			t.Errorf("exit_code = %#v", code)
		}
	})

	t.Run("creates", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "once", map[string]cty.Value{
			"instance": str(name), "command": list("sh", "-c", "echo run >> /root/runs; touch /root/made"), "creates": str("/root/made")})
		if r := s.read(nil); r.Observation != providers.Absent {
			t.Errorf("before: %v %s", r.Observation, r.Detail)
		}
		s.mustApply(s.mustPlan(nil).Private, nil)
		if r := s.read(nil); r.Observation != providers.Present {
			t.Errorf("after: %v %s", r.Observation, r.Detail)
		}
		wantContains(t, "plan", s.mustPlan(nil).Diff, "skip: /root/made exists")
		s.mustApply(nil, nil)
		if got := readIn(t, c, name, "/root/runs"); got != "run\n" {
			t.Errorf("the command ran again: %q", got)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "stream", map[string]cty.Value{
			"instance": str(name), "command": list("sh", "-c", "echo first-line; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo last-line")})
		log := &providertest.SyncBuffer{}
		done := make(chan providers.ApplyResponse, 1)
		go func() {
			done <- p.Apply(ctxT(t, 60*time.Second), providers.ApplyRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Log: log})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(log.String(), "first-line") {
			if time.Now().After(deadline) {
				t.Fatalf("the first line never reached the log:\n%s", log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if strings.Contains(log.String(), "\nlast-line\n") {
			t.Fatal("the command ended before it was let go")
		}
		if err := c.PushFile(ctxT(t, 10*time.Second), name, "/tmp/go", incusapi.FilePut{}); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		wantContains(t, "log", log.String(), "first-line\n", "last-line\n")
	})

	t.Run("timeout", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "slow", map[string]cty.Value{
			"instance": str(name), "command": list("sh", "-c", "echo started; sleep 60"), "timeout": str("1s")})
		start := time.Now()
		r, _ := s.apply(ctxT(t, 60*time.Second), nil, nil)
		wantDiag(t, r.Diagnostics, "Command Timed Out", "incus_exec.slow", "within the timeout of 1s", "started", "its processes were killed")
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("the step waited %s for a command with a timeout of 1s", d)
		}
		// The command is gone, not left running.
		if running, err := c.RunningExecs(ctxT(t, 10*time.Second), name); err != nil || len(running) != 0 {
			t.Errorf("after the timeout, commands still run: %+v %v", running, err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		s := newStep(t, p, incus.Exec, "bad", map[string]cty.Value{
			"instance": str(name), "command": list("true"), "timeout": str("soon"), "creates": str("relative")})
		d := s.plan(nil).Diagnostics
		wantDiag(t, d, "Invalid Attribute Value", "incus_exec.bad", `"soon"`)
		s = newStep(t, p, incus.Exec, "nocwd", map[string]cty.Value{"instance": str(name), "command": list("true"), "cwd": str("/nowhere")})
		r, _ := s.apply(ctxT(t, 30*time.Second), nil, nil)
		wantDiag(t, r.Diagnostics, "Command Failed", "incus_exec.nocwd", "/nowhere")
	})
}

// loadExec loads testdata/exec for an instance.
func loadExec(t testing.TB, name string) *phases.Runbook {
	t.Helper()
	dir, err := filepath.Abs("testdata/exec")
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]phases.Schema{}
	for n, f := range factories {
		schemas[n] = f().Schema()
	}
	rb, diags := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{Dir: dir, Schemas: schemas, Vars: []string{"instance=" + name}}).Load()
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	return rb
}

// TestExecCrashResume kills (SIGKILL) a migrate process while its
// incus_exec runs; the command runs to its end in the instance, and the
// resumed run sees creates and does not run it a second time.
func TestExecCrashResume(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "exec-crash", true, nil)
	dir := t.TempDir()
	killHelper(t, "TestHelperRunExec", []string{"MIGRATE_INCUS_EXEC_HELPER=" + dir + "," + name},
		60*time.Second, 0, "started the command", func() bool { return readIn(t, c, name, "/root/count") != "" })
	if readIn(t, c, name, "/root/marker") != "" {
		t.Fatal("the command finished before the kill; the test proves nothing")
	}
	wantRunning(t, dir, phases.Address{Type: incus.Exec, Name: "dump"}, "the exec step")
	deadline := time.Now().Add(60 * time.Second)
	for readIn(t, c, name, "/root/marker") == "" {
		if time.Now().After(deadline) {
			t.Fatal("the command never finished after the kill")
		}
		time.Sleep(100 * time.Millisecond)
	}

	rb := loadExec(t, name)
	plan, err := runPhase(t, rb, dir, "data")
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	for _, sp := range plan.Phases[0].Steps {
		t.Logf("resume plan %s: %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
	}
	if got := readIn(t, c, name, "/root/count"); got != "run\n" {
		t.Errorf("the command ran %d times: %q", strings.Count(got, "run"), got)
	}
	noExecOutputs(t, c, name, "after the resumed run")
	rollbackAll(t, rb, dir)
	if got := readIn(t, c, name, "/root/marker"); got != "" {
		t.Errorf("rollback did not run the revert command: /root/marker holds %q", got)
	}
}

// TestExecResumeWhileRunning kills a migrate process while its
// incus_exec runs and resumes at once, before creates exists: the resumed
// run waits for the command still running and does not start it again.
func TestExecResumeWhileRunning(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "exec-early", true, nil)
	dir := t.TempDir()
	killHelper(t, "TestHelperRunExec", []string{"MIGRATE_INCUS_EXEC_HELPER=" + dir + "," + name},
		60*time.Second, 0, "started the command", func() bool { return readIn(t, c, name, "/root/count") != "" })
	if readIn(t, c, name, "/root/marker") != "" {
		t.Fatal("the command finished before the resume; the test proves nothing")
	}
	if _, err := runPhase(t, loadExec(t, name), dir, "data"); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	if got := readIn(t, c, name, "/root/count"); got != "run\n" {
		t.Errorf("the command ran %d times: %q", strings.Count(got, "run"), got)
	}
	if readIn(t, c, name, "/root/marker") != "done\n" {
		t.Error("after the resumed run the command's marker is missing")
	}
	noExecOutputs(t, c, name, "after the resumed run")
}

// TestExecKilledThenRolledBack kills a migrate process while its
// incus_exec runs and rolls back without resuming: the record the step
// saved when it started the command says which output files the daemon
// keeps for it, and rollback removes them (after the command's end) as
// it runs the revert command.
func TestExecKilledThenRolledBack(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "exec-killrb", true, nil)
	dir := t.TempDir()
	killHelper(t, "TestHelperRunExec", []string{"MIGRATE_INCUS_EXEC_HELPER=" + dir + "," + name},
		60*time.Second, 0, "started the command", func() bool { return readIn(t, c, name, "/root/count") != "" })
	if readIn(t, c, name, "/root/marker") != "" {
		t.Fatal("the command finished before the kill; the test proves nothing")
	}
	if left, err := c.ExecOutputs(ctxT(t, 10*time.Second), name); err != nil || len(left) == 0 {
		t.Fatalf("after the kill the daemon should keep the command's output files: %v %v", left, err)
	}
	rollbackAll(t, loadExec(t, name), dir)
	noExecOutputs(t, c, name, "after the rollback")
}

// noExecOutputs fails the test when the instance keeps exec output
// files: a command's are deleted once it is seen to its end.
func noExecOutputs(t *testing.T, c *incusapi.Client, name, when string) {
	t.Helper()
	left, err := c.ExecOutputs(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%s the daemon keeps exec output files in %s: %v", when, name, left)
	}
}

// TestHelperRunExec is the migrate process TestExecCrashResume kills.
func TestHelperRunExec(t *testing.T) {
	env := os.Getenv("MIGRATE_INCUS_EXEC_HELPER")
	if env == "" {
		return // not a helper: nothing to do
	}
	dir, name, _ := strings.Cut(env, ",")
	_, err := runPhase(t, loadExec(t, name), dir, "data")
	fmt.Println("helper finished:", err)
	os.Exit(0)
}

// TestExecWaitsOnlyForItsOwnCommand: a step with creates that never ran
// starts its command while another command runs in the instance (two
// apps' exports in one VM side by side); one whose record says its run
// was killed as it started the command waits for the instance's commands
// first, then finds creates and runs nothing a second time.
func TestExecWaitsOnlyForItsOwnCommand(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "exec-side", true, nil)
	p := provider(t, nil)
	other, err := c.StartExec(ctxT(t, 10*time.Second), name, incusapi.ExecPost{
		Command: []string{"sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.1; done; echo first >> /root/made"}})
	if err != nil {
		t.Fatal(err)
	}

	side := newStep(t, p, incus.Exec, "side", map[string]cty.Value{
		"instance": str(name), "command": list("sh", "-c", "echo side >> /root/side"), "creates": str("/root/side")})
	if r, log := side.apply(ctxT(t, 60*time.Second), nil, nil); r.Diagnostics.HasErrors() {
		t.Fatalf("a step that never ran, beside another command: %v\n%s", r.Diagnostics.Err(), log)
	}
	if got := readIn(t, c, name, "/root/side"); got != "side\n" {
		t.Errorf("/root/side holds %q", got)
	}
	if running, err := c.RunningExecs(ctxT(t, 10*time.Second), name); err != nil || len(running) != 1 {
		t.Fatalf("the other command should still run: %+v %v", running, err)
	}

	made := newStep(t, p, incus.Exec, "made", map[string]cty.Value{
		"instance": str(name), "command": list("sh", "-c", "echo second >> /root/made"), "creates": str("/root/made")})
	prior := &providers.Prior{Outputs: cty.EmptyObjectVal, Revert: &providers.RevertData{
		Description: "nothing to undo", Data: json.RawMessage(`{"instance":"` + name + `","starting":true}`)}}
	log := &providertest.SyncBuffer{}
	done := make(chan providers.ApplyResponse, 1)
	go func() {
		done <- p.Apply(ctxT(t, 60*time.Second), providers.ApplyRequest{Type: made.typ, Addr: made.addr, Config: made.cfg, Prior: prior, Log: log})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), "waiting for a command already running") {
		if time.Now().After(deadline) {
			t.Fatalf("a step killed as it started its command did not wait for the instance's commands:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.PushFile(ctxT(t, 10*time.Second), name, "/tmp/go", incusapi.FilePut{}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	if _, err := c.WaitExec(ctxT(t, 10*time.Second), other); err != nil {
		t.Fatal(err)
	}
	if got := readIn(t, c, name, "/root/made"); got != "first\n" {
		t.Errorf("the command ran again beside the one left running: /root/made holds %q", got)
	}
}
