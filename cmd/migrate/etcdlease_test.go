package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
)

// lockLease is the lease the lock of the state under prefix is bound to.
func lockLease(t *testing.T, cli *clientv3.Client, prefix string) (clientv3.LeaseID, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"lock")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("reading the lock: %v %v", err, resp)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease), resp.Kvs[0].Value
}

// records are the step records of the state, as state show --json has
// them.
func records(t *testing.T, dir string) map[string]struct {
	Status    string `json:"status"`
	LastError string `json:"last_error"`
	Holder    *struct {
		PID   int   `json:"pid"`
		Lease int64 `json:"lease"`
	} `json:"holder"`
} {
	t.Helper()
	r := run(t, dir, 0, "state", "show", "--json")
	var doc struct {
		State struct {
			Steps map[string]struct {
				Status    string `json:"status"`
				LastError string `json:"last_error"`
				Holder    *struct {
					PID   int   `json:"pid"`
					Lease int64 `json:"lease"`
				} `json:"holder"`
			} `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("state show --json: %v: %s", err, r)
	}
	return doc.State.Steps
}

// A run whose lease is revoked from another client while a step waits
// stops at once, far sooner than the step or the lease's TTL would end:
// the step is cut off, as by a second Ctrl-C, the state records it failed
// saying why, no later step starts, and the next run does it again.
func TestEtcdLeaseRevokedCancelsRun(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	const prefix = "migrate/revoked/"
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), prefix, "60s") + `
phase "p" {
  step "exec" "slow" {
    command = ["sh", "-c", "echo run >> slow.runs; [ -e go ] || sleep 120; touch slow.finished"]
  }
  step "exec" "next" {
    command    = ["touch", "next.ran"]
    depends_on = [exec.slow]
  }
}
`})
	cmd, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "slow.runs"), out, errb)
	cli := c.Client()
	lease, _ := lockLease(t, cli, prefix)
	if recs := records(t, dir); recs["exec.slow"].Status != "running" || recs["exec.slow"].Holder == nil ||
		clientv3.LeaseID(recs["exec.slow"].Holder.Lease) != lease || recs["exec.slow"].Holder.PID != cmd.Process.Pid {
		t.Errorf("the running step does not record its holder's lease %x and pid %d: %+v", lease, cmd.Process.Pid, recs["exec.slow"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	revoked := time.Now()
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(45 * time.Second):
		t.Fatalf("the run went on 45s after its lease was revoked (lock_ttl 60s, the step sleeps 120s):\n%s\n%s", out, errb)
	}
	t.Logf("the run ended %v after its lease was revoked", time.Since(revoked).Round(time.Millisecond))
	if err == nil {
		t.Fatalf("the run whose lease was revoked succeeded:\n%s\n%s", out, errb)
	}
	for _, want := range []string{"state lock lost", "cut off"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the run does not say %q:\n%s\n%s", want, out, errb)
		}
	}
	for _, name := range []string{"slow.finished", "next.ran"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s exists: the run went on after its lease was revoked", name)
		}
	}
	slow := records(t, dir)["exec.slow"]
	if slow.Status != "failed" || !strings.Contains(slow.LastError, "cut off") || !strings.Contains(slow.LastError, "state lock lost") {
		t.Errorf("the state does not record exec.slow cut off: %+v", slow)
	}
	if slow.Holder != nil {
		t.Errorf("a step no longer running keeps a holder: %+v", slow.Holder)
	}
	// The next run does it again, and goes on.
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	run(t, dir, 0, "run", "--all", "--auto-approve")
	if b, _ := os.ReadFile(filepath.Join(dir, "slow.runs")); string(b) != "run\nrun\n" {
		t.Errorf("slow.runs = %q, want the cut-off run and the next", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "next.ran")); err != nil {
		t.Error("exec.next did not run on resume")
	}
}

// A runner that finds a step running under another holder's lease that
// still lives (that holder stopped, SIGSTOP, as a laptop asleep; its lock
// key deleted by hand) refuses it, naming that holder, and leaves its
// record; once that holder is gone, its lease with it, the next run reads
// and redoes the step.
func TestEtcdRunningElsewhereRefused(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	const prefix = "migrate/elsewhere/"
	dir := runbook(t, map[string]string{"main.hcl": etcdBlock(c.Config(), prefix, "60s") + `
phase "p" {
  step "exec" "slow" {
    command = ["sh", "-c", "echo run >> slow.runs; [ -e go ] || sleep 120"]
  }
}
`})
	first, out, errb := start(t, dir, "run", "--all", "--auto-approve")
	waitFile(t, filepath.Join(dir, "slow.runs"), out, errb)
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Signal(syscall.SIGCONT) })
	cli := c.Client()
	lease, _ := lockLease(t, cli, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, prefix+"lock"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	r := run(t, dir, 1, "run", "--all", "--auto-approve")
	for _, want := range []string{"exec.slow may still be running elsewhere", fmt.Sprintf("pid %d", first.Process.Pid), fmt.Sprintf("%x", int64(lease)), "wait for that run to end"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("the second runner does not say %q: %s", want, r)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "slow.runs")); string(b) != "run\n" {
		t.Errorf("slow.runs = %q: the second runner applied the step again", b)
	}
	if slow := records(t, dir)["exec.slow"]; slow.Status != "running" || slow.Holder == nil || clientv3.LeaseID(slow.Holder.Lease) != lease {
		t.Errorf("the refusal changed the record of exec.slow: %+v", slow)
	}

	// The first holder wakes, finds its lock gone, stops and gives its
	// lease back: the next run reads the step and does it again.
	first.Process.Signal(syscall.SIGCONT)
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("the first run, whose lock was deleted, succeeded:\n%s\n%s", out, errb)
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the first run went on 45s after it found its lock gone:\n%s\n%s", out, errb)
	}
	if !strings.Contains(errb.String(), "state lock lost") {
		t.Errorf("the first run does not say it lost its lock:\n%s\n%s", out, errb)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve")
	if _, steps := status(t, dir); steps["exec.slow"].Status != "done" {
		t.Errorf("exec.slow after the first holder is gone: %+v", steps["exec.slow"])
	}
}
