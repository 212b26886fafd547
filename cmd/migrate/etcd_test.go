package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/homelab-migrate/migrate/state/etcdstate"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
)

// hosts are the endpoints of cfg without their scheme, for a runbook's
// block or a URL (TLS comes from ca, not the scheme).
func hosts(cfg etcdstate.Config) []string {
	var out []string
	for _, e := range cfg.Endpoints {
		if i := strings.Index(e, "://"); i >= 0 {
			e = e[i+3:]
		}
		out = append(out, e)
	}
	return out
}

// etcdBlock is a backend block for the cluster of cfg, under prefix.
func etcdBlock(cfg etcdstate.Config, prefix, lockTTL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend \"etcd\" {\n  endpoints = [%q", hosts(cfg)[0])
	for _, h := range hosts(cfg)[1:] {
		fmt.Fprintf(&b, ", %q", h)
	}
	fmt.Fprintf(&b, "]\n  prefix = %q\n  lock_ttl = %q\n", prefix, lockTTL)
	for name, v := range map[string]string{"ca": cfg.CA, "cert": cfg.Cert, "key": cfg.Key, "username": cfg.Username, "password": cfg.Password} {
		if v != "" {
			fmt.Fprintf(&b, "  %s = %q\n", name, v)
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// etcdURL is the --backend URL of the cluster of cfg, under prefix (the
// password goes in MIGRATE_ETCD_PASSWORD).
func etcdURL(cfg etcdstate.Config, prefix string) string {
	u := "etcd://" + strings.Join(hosts(cfg), ",") + "/" + prefix + "?lock_ttl=2s"
	for name, v := range map[string]string{"ca": cfg.CA, "cert": cfg.Cert, "key": cfg.Key, "user": cfg.Username} {
		if v != "" {
			u += "&" + name + "=" + v
		}
	}
	return u
}

// Two runs race for one state in etcd: one wins, the other fails at once
// (while the winner still runs) naming it; the step runs once.
func TestEtcdRunRace(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/race/", "2s") + `
phase "p" {
  step "exec" "slow" {
    command = ["sh", "-c", "echo run >> runs.txt; sleep 5"]
  }
}
`})
	type outcome struct {
		cmd  *exec.Cmd
		err  error
		out  string
		when time.Time
	}
	done := make(chan outcome, 2)
	for range 2 {
		cmd := exec.Command(bin, "--runbook", dir, "run", "--all", "--auto-approve")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		go func() {
			err := cmd.Wait()
			done <- outcome{cmd, err, out.String(), time.Now()}
		}()
	}
	first, second := <-done, <-done
	if first.err == nil || second.err != nil {
		t.Fatalf("want the loser to fail first, then the winner to succeed:\nfirst (%v):\n%s\nsecond (%v):\n%s", first.err, first.out, second.err, second.out)
	}
	host, _ := os.Hostname()
	winner := second.cmd.Process.Pid
	for _, want := range []string{fmt.Sprintf("pid %d", winner), "@" + host, "run --all --auto-approve"} {
		if !strings.Contains(first.out, want) {
			t.Errorf("the loser's error does not name the holder (%q):\n%s", want, first.out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "runs.txt")); string(b) != "run\n" {
		t.Errorf("runs.txt = %q: the step ran more than once", b)
	}
	if _, steps := status(t, dir); steps["exec.slow"].Status != "done" {
		t.Errorf("exec.slow: %+v", steps["exec.slow"])
	}
}

// A run killed with SIGKILL keeps its lease until it expires: the next run
// (another process) is refused until then, then resumes: a step done is
// not run again, the one interrupted is redone once (its creates path was
// not made), each effect made once.
func TestEtcdKillAndResume(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/kill/", "2s") + `
phase "p" {
  step "exec" "first" {
    command = ["sh", "-c", "echo run >> first.runs; mkdir first.effect"]
    creates = "first.effect"
  }
  step "exec" "slow" {
    command    = ["sh", "-c", "echo run >> slow.runs; [ -e go ] || sleep 60; mkdir slow.effect"]
    creates    = "slow.effect"
    depends_on = [exec.first]
  }
  step "exec" "last" {
    command    = ["sh", "-c", "echo run >> last.runs; mkdir last.effect"]
    creates    = "last.effect"
    depends_on = [exec.slow]
  }
}
`})
	cmd, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "slow.runs"), out, errb)
	killed := cmd.Process.Pid
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The lease outlives the holder by up to lock_ttl: refused, naming it.
	r := migrate(t, dir, "run", "--all", "--auto-approve")
	if r.code == 0 {
		t.Log("the lease had already expired: the resume was not refused first")
	} else if !strings.Contains(r.stderr, fmt.Sprintf("pid %d", killed)) {
		t.Fatalf("the second run fails without naming the killed holder: %s", r)
	}
	deadline := time.Now().Add(60 * time.Second)
	for r.code != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the run never resumed: %s", r)
		}
		if !strings.Contains(r.stderr, "locked") {
			t.Fatalf("the resume failed for another reason: %s", r)
		}
		time.Sleep(200 * time.Millisecond)
		r = migrate(t, dir, "run", "--all", "--auto-approve")
	}
	for name, want := range map[string]string{"first.runs": "run\n", "slow.runs": "run\nrun\n", "last.runs": "run\n"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
	_, steps := status(t, dir)
	for _, a := range []string{"exec.first", "exec.slow", "exec.last"} {
		if steps[a].Status != "done" {
			t.Errorf("%s: %+v", a, steps[a])
		}
	}
}

// state unlock breaks a dead holder's lease at once, without waiting for
// its TTL; state show names the holder.
func TestEtcdUnlock(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/unlock/", "120s") + `
phase "p" {
  step "exec" "slow" {
    command = ["sh", "-c", "touch started; [ -e go ] || sleep 60"]
  }
}
`})
	cmd, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "started"), out, errb)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	r := run(t, dir, 0, "state", "show", "--json")
	var doc struct {
		Lock *struct {
			ID  string `json:"id"`
			PID int    `json:"pid"`
		} `json:"lock"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Lock == nil || doc.Lock.PID != cmd.Process.Pid {
		t.Fatalf("state show --json does not name the dead holder (%v): %s", err, r)
	}
	r = run(t, dir, 1, "state", "unlock", "not-"+doc.Lock.ID)
	if !strings.Contains(r.stderr, doc.Lock.ID) {
		t.Errorf("unlock with a wrong ID: %s", r)
	}
	run(t, dir, 0, "state", "unlock", doc.Lock.ID)
	run(t, dir, 0, "run", "--all", "--auto-approve")
}

// push copies a local state into etcd; pull copies it back into a fresh
// local directory, equal; a push over another lineage needs --force.
func TestEtcdPushPull(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
	url := etcdURL(c.Config(), "migrate/pushed/")
	r := run(t, dir, 0, "state", "push", "--to", url)
	if !strings.Contains(r.stderr, "Copied the state") {
		t.Errorf("push: %s", r)
	}
	phases, _ := status(t, dir)
	r = run(t, dir, 0, "--backend", url, "status", "--json")
	if !strings.Contains(r.stdout, `"status": "complete"`) {
		t.Errorf("the pushed state is not complete for phase A: %s (local: %v)", r, phases)
	}
	fresh := filepath.Join(t.TempDir(), "fresh")
	run(t, dir, 0, "--backend", "local:"+fresh, "state", "pull", "--from", url)
	orig := run(t, dir, 0, "state", "show", "--json").stdout
	copied := run(t, dir, 0, "--backend", "local:"+fresh, "state", "show", "--json").stdout
	var a, b struct {
		State struct {
			Lineage string                     `json:"lineage"`
			Serial  uint64                     `json:"serial"`
			Steps   map[string]json.RawMessage `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(orig), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(copied), &b); err != nil {
		t.Fatal(err)
	}
	if a.State.Lineage != b.State.Lineage || len(a.State.Steps) != len(b.State.Steps) || len(a.State.Steps) == 0 {
		t.Fatalf("pulled state differs:\n%s\n%s", orig, copied)
	}
	for k, v := range a.State.Steps {
		if string(b.State.Steps[k]) != string(v) {
			t.Errorf("step %s differs:\n%s\n%s", k, v, b.State.Steps[k])
		}
	}
	// The etcd state is ahead after a run there: pulling the older local
	// one over it is refused.
	run(t, dir, 0, "--backend", url, "run", "--phase", "B", "--auto-approve")
	r = run(t, dir, 1, "state", "push", "--to", url)
	if !strings.Contains(r.stderr, "serial") {
		t.Errorf("a push over a newer serial: %s", r)
	}
	// Another runbook's state is another lineage.
	other := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, other, 0, "run", "--phase", "A", "--auto-approve")
	r = run(t, other, 1, "state", "push", "--to", url)
	if !strings.Contains(r.stderr, "lineage") {
		t.Errorf("a push over another lineage: %s", r)
	}
	run(t, other, 0, "state", "push", "--to", url, "--force")
}

// --backend overrides the runbook's block: the run goes where it says,
// and the block's state is untouched.
func TestEtcdBackendFlagOverridesBlock(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/block/", "2s") + twoPhases})
	url := etcdURL(c.Config(), "migrate/flag/")
	run(t, dir, 0, "--backend", url, "run", "--all", "--auto-approve")
	r := run(t, dir, 0, "--backend", url, "status", "--json")
	if !strings.Contains(r.stdout, `"status": "complete"`) {
		t.Errorf("--backend: %s", r)
	}
	phases, _ := status(t, dir)
	if phases["A"] != "not started" {
		t.Errorf("the block's state changed: %v", phases)
	}
	r = migrateEnv(t, dir, []string{"MIGRATE_BACKEND=" + url}, "status", "--json")
	expect(t, r, 0, "status")
	if !strings.Contains(r.stdout, `"status": "complete"`) {
		t.Errorf("MIGRATE_BACKEND: %s", r)
	}
}

// A password given in the runbook appears nowhere: not in the output of
// plan, run, status, state show, not in the logs, not in etcd; a wrong one
// (from MIGRATE_ETCD_PASSWORD) fails naming the endpoints, not itself.
// (A password needs TLS: TestEtcdPasswordNeedsTLS.)
func TestEtcdPasswordNowhere(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true, Auth: true})
	cfg := c.Config()
	if cfg.Password == "" {
		t.Fatal("etcdtest gave no password with Auth")
	}
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(cfg, "migrate/secret/", "2s") + twoPhases})
	var seen strings.Builder
	for _, args := range [][]string{
		{"validate"}, {"plan"}, {"run", "--all", "--auto-approve"}, {"status"}, {"state", "show"},
		{"--log-level", "debug", "rollback", "--auto-approve"},
	} {
		r := run(t, dir, 0, args...)
		seen.WriteString(r.stdout + r.stderr)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, ".migrate", "logs", "*"))
	if len(logs) == 0 {
		t.Error("no run logs in the runbook's .migrate/logs")
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		seen.Write(b)
	}
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Error("nothing in etcd")
	}
	for _, kv := range resp.Kvs {
		seen.Write(kv.Key)
		seen.Write(kv.Value)
	}
	if strings.Contains(seen.String(), cfg.Password) {
		t.Errorf("the password appears in the output, the logs or etcd")
	}

	r := migrateEnv(t, dir, []string{"MIGRATE_ETCD_PASSWORD=wrong-canary-pw"}, "plan")
	expect(t, r, 1, "plan")
	if strings.Contains(r.stdout+r.stderr, "wrong-canary-pw") || strings.Contains(r.stdout+r.stderr, cfg.Password) {
		t.Errorf("a failed login shows a password: %s", r)
	}
	if !strings.Contains(r.stderr, hosts(cfg)[0]) {
		t.Errorf("a failed login does not name the endpoints: %s", r)
	}
}

// plan and status read the state while a run holds the lock; a run whose
// lock is taken away (state unlock) starts no further step and says why.
func TestEtcdReadersAndLostLock(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/lost/", "30s") + `
phase "p" {
  step "exec" "slow" {
    command = ["sh", "-c", "touch started; while [ ! -e go ]; do sleep 0.05; done"]
  }
  step "exec" "next" {
    command    = ["touch", "next.ran"]
    depends_on = [exec.slow]
  }
}
`})
	cmd, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "started"), out, errb)
	if _, steps := status(t, dir); steps["exec.slow"].Status != "running" {
		t.Errorf("status during the run: %+v", steps["exec.slow"])
	}
	r := run(t, dir, 0, "plan")
	if !strings.Contains(r.stdout, "exec.next") {
		t.Errorf("plan during the run: %s", r)
	}
	r = run(t, dir, 0, "state", "show", "--json")
	var doc struct {
		Lock *struct {
			ID string `json:"id"`
		} `json:"lock"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Lock == nil {
		t.Fatalf("state show --json: %v: %s", err, r)
	}
	run(t, dir, 0, "state", "unlock", doc.Lock.ID)
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	err := cmd.Wait()
	if err == nil {
		t.Fatalf("the run whose lock was removed succeeded:\n%s\n%s", out, errb)
	}
	if !strings.Contains(out.String()+errb.String(), "state lock lost") {
		t.Errorf("the run does not say it lost its lock:\n%s\n%s", out, errb)
	}
	if _, err := os.Stat(filepath.Join(dir, "next.ran")); err == nil {
		t.Error("a step started after the lock was lost")
	}
	// The next run finishes the work.
	run(t, dir, 0, "run", "--all", "--auto-approve")
	if _, err := os.Stat(filepath.Join(dir, "next.ran")); err != nil {
		t.Error("exec.next did not run on resume")
	}
}

// TLS with a client certificate and authentication, all from the URL and
// MIGRATE_ETCD_PASSWORD; an unreachable cluster names its endpoints.
func TestEtcdTLSAuthURL(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, TLS: true, Auth: true})
	cfg := c.Config()
	dir := runbook(t, map[string]string{"main.hcl": twoPhases})
	url := etcdURL(cfg, cfg.Prefix)
	if strings.Contains(url, cfg.Password) {
		t.Fatal("the URL holds the password")
	}
	pw := []string{"MIGRATE_ETCD_PASSWORD=" + cfg.Password}
	r := migrateEnv(t, dir, pw, "--backend", url, "run", "--all", "--auto-approve")
	expect(t, r, 0, "run")
	r = migrateEnv(t, dir, pw, "--backend", url, "status", "--json")
	expect(t, r, 0, "status")
	if !strings.Contains(r.stdout, `"status": "complete"`) {
		t.Errorf("status: %s", r)
	}
	// Without the password: refused, saying so, naming the endpoints.
	r = migrate(t, dir, "--backend", url, "status")
	expect(t, r, 1, "status")
	if !strings.Contains(r.stderr, hosts(cfg)[0]) || !strings.Contains(r.stderr, "MIGRATE_ETCD_PASSWORD") {
		t.Errorf("no password: %s", r)
	}
	r = migrate(t, dir, "--backend", "etcd://127.0.0.1:1/migrate/x/", "status")
	expect(t, r, 1, "status")
	if !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("unreachable: %s", r)
	}
}

// gatedStep is an exec step that says it started, waits for the file
// go-NAME, then makes its effect once (creates: a resume does not redo it).
func gatedStep(name, dependsOn string) string {
	dep := ""
	if dependsOn != "" {
		dep = "\n    depends_on = [exec." + dependsOn + "]"
	}
	return fmt.Sprintf(`
  step "exec" %[1]q {
    command = ["sh", "-c", "touch %[1]s.started; i=0; while [ ! -e go-%[1]s ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo run >> %[1]s.runs; mkdir %[1]s.effect"]
    creates = "%[1]s.effect"%[2]s
  }
`, name, dep)
}

// A run goes on while one member of three is killed and restarted; a run
// that loses the quorum stops with a clear message, its state intact, and
// the same command resumes once the members are back: every step's
// effect made once.
func TestEtcdRunThroughMemberLossAndQuorumLoss(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), "migrate/members/", "5s") +
		"phase \"one\" {" + gatedStep("a", "") + gatedStep("b", "a") + gatedStep("c", "b") + "}\n" +
		"phase \"two\" {" + gatedStep("d", "") + gatedStep("e", "d") + "}\n"})
	gate := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "go-"+name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// One member of three killed while a step runs, restarted while the
	// next one runs: the run does not notice.
	cmd, out, errb := start(t, dir, "run", "--phase", "one", "--auto-approve")
	waitFile(t, filepath.Join(dir, "a.started"), out, errb)
	c.Kill(0)
	gate("a")
	waitFile(t, filepath.Join(dir, "b.started"), out, errb)
	c.Restart(0)
	c.WaitReady(0)
	gate("b")
	gate("c")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run with a member killed and restarted: %v\n%s%s", err, out, errb)
	}

	// Two of three killed while a step runs: its checkpoint cannot be
	// written, and the run stops saying why.
	cmd, out, errb = start(t, dir, "run", "--phase", "two", "--auto-approve")
	waitFile(t, filepath.Join(dir, "d.started"), out, errb)
	c.Kill(1)
	c.Kill(2)
	gate("d")
	gate("e")
	stopped := make(chan error, 1)
	go func() { stopped <- cmd.Wait() }()
	select {
	case err := <-stopped:
		if err == nil {
			t.Fatalf("the run succeeded without a quorum:\n%s%s", out, errb)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the run without a quorum did not stop in 3 minutes:\n%s%s", out, errb)
	}
	t.Logf("the run without a quorum said:\n%s", errb)
	if msg := errb.String(); !strings.Contains(msg, "quorum") {
		t.Errorf("the run that lost the quorum does not say so:\n%s", msg)
	}
	c.Restart(1)
	c.Restart(2)
	c.WaitReady(1)
	c.WaitReady(2)
	// The lease of the stopped run may outlive it: the same command is
	// refused as locked until it expires, then resumes.
	deadline := time.Now().Add(2 * time.Minute)
	r := migrate(t, dir, "run", "--phase", "two", "--auto-approve")
	for r.code != 0 {
		if time.Now().After(deadline) || !strings.Contains(r.stderr, "locked") {
			t.Fatalf("the run did not resume once the quorum was back: %s", r)
		}
		time.Sleep(500 * time.Millisecond)
		r = migrate(t, dir, "run", "--phase", "two", "--auto-approve")
	}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name+".runs")); string(b) != "run\n" {
			t.Errorf("%s.runs = %q, want one run", name, b)
		}
	}
	phases, steps := status(t, dir)
	for _, ph := range []string{"one", "two"} {
		if phases[ph] != "complete" {
			t.Errorf("phase %s is %s, steps %+v", ph, phases[ph], steps)
		}
	}
}
