package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// event is one object of migrate's --json stream (engine.Event).
type event struct {
	Kind    string    `json:"kind"`
	Time    time.Time `json:"time"`
	Phase   string    `json:"phase"`
	Address string    `json:"address"`
	Message string    `json:"message"`
	Error   string    `json:"error"`
}

func (e event) String() string {
	s := e.Kind
	if e.Address != "" {
		s += " " + e.Address
	} else if e.Phase != "" {
		s += " " + e.Phase
	}
	if e.Error != "" {
		s += ": " + e.Error
	} else if e.Message != "" && e.Kind != "step_output" && e.Kind != "step_planned" {
		s += ": " + e.Message
	}
	return s
}

// started and finished: the events that open and close a step's work, in
// a run and in a rollback.
func (e event) started() bool { return e.Kind == "step_started" || e.Kind == "step_reverting" }
func (e event) finished() bool {
	switch e.Kind {
	case "step_done", "step_reverted", "step_failed", "step_revert_failed", "step_skipped", "step_adopted":
		return true
	}
	return false
}

// eventLog is migrate's stdout: copied to a file, and parsed line by line.
type eventLog struct {
	mu      sync.Mutex
	f       *os.File
	partial []byte
	events  []event
	notify  chan struct{} // a new event (capacity 1: never blocks the writer)
}

func (l *eventLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		var e event
		if json.Unmarshal(l.partial[:i], &e) == nil && e.Kind != "" {
			l.events = append(l.events, e)
		}
		l.partial = l.partial[i+1:]
	}
	select {
	case l.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (l *eventLog) since(i int) []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events[i:]...)
}

// killPlan is where an attempt is killed: delay after the start or the
// end of the step addr, or delay after the command started when addr is
// empty (or the step is not run by this attempt, having finished before).
type killPlan struct {
	addr  string
	done  bool
	delay time.Duration
}

func (k killPlan) String() string {
	switch {
	case k.addr == "":
		return fmt.Sprintf("%s after the start", k.delay.Round(time.Millisecond))
	case k.done:
		return fmt.Sprintf("%s after %s ended", k.delay.Round(time.Millisecond), k.addr)
	}
	return fmt.Sprintf("%s after %s started", k.delay.Round(time.Millisecond), k.addr)
}

// outcome is how an attempt of a command ended.
type outcome struct {
	killed bool
	at     string // where the kill landed, when killed
	err    error  // its exit, when not killed
	hung   string // why the test stopped it (its deadline, a cluster without etcd)
	hungAs string // the invariant that stopping breaks
	hungBy string // the reason in a few words
	events []event
	stdout string // the files its output went to
	stderr string
	took   time.Duration
}

// printed is what an attempt printed, to explain a failure: its last
// events (one line each) and its standard error.
func (o outcome) printed() string {
	var lines []string
	for _, e := range o.events {
		if e.Kind != "step_output" {
			lines = append(lines, "  "+e.String())
		}
	}
	return fmt.Sprintf("its last events (of %s):\n%s\nits standard error:\n%s", o.stdout, tail(strings.Join(lines, "\n"), 25), tail(readFile(o.stderr), 25))
}

// attempt runs migrate args once (with --json), killing it where plan
// says (nil: never), or when it runs past the deadline, or when a
// kubernetes_ready waits on a cluster whose etcd does not answer. At a
// planned kill it first freezes migrate and checks that the same command
// started beside it is refused without changing the state.
func (w *world) attempt(t *testing.T, label string, args []string, plan *killPlan) outcome {
	t.Helper()
	w.seq++
	base := filepath.Join(w.root, "out", fmt.Sprintf("%03d-%s", w.seq, strings.ReplaceAll(label, " ", "-")))
	o := outcome{stdout: base + ".jsonl", stderr: base + ".stderr"}
	stdout, err := os.Create(o.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(o.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	evs := &eventLog{f: stdout, notify: make(chan struct{}, 1)}

	cmd := w.command(context.Background(), append(args, "--json")...)
	cmd.Stdout, cmd.Stderr = evs, stderr
	cmd.WaitDelay = 30 * time.Second // a provider program holding stdout dies with migrate
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.NewTimer(w.cfg.deadline)
	defer deadline.Stop()
	watchdog := time.NewTicker(5 * time.Second)
	defer watchdog.Stop()
	var fire <-chan time.Time // the planned kill, once its moment is known
	if plan != nil && plan.addr == "" {
		fire = time.After(plan.delay)
	}
	running := map[string]time.Time{} // steps started and not finished
	seen := 0
	for {
		select {
		case err := <-exited:
			o.err, o.took, o.events = err, time.Since(start), evs.since(0)
			return o
		case <-evs.notify:
			for _, e := range evs.since(seen) {
				seen++
				switch {
				case e.started():
					running[e.Address] = e.Time
				case e.finished():
					delete(running, e.Address)
				}
				if plan != nil && fire == nil && e.Address == plan.addr && (plan.done && e.finished() || !plan.done && e.started()) {
					fire = time.After(plan.delay)
				}
			}
		case <-fire:
			if w.freezeProbeKill(t, label, cmd, args, exited) {
				o.killed, o.at = true, plan.String()+" "+landed(evs.since(0))
				o.took, o.events = time.Since(start), evs.since(0)
				return o
			}
			fire = nil // it had exited: the next select reads how
		case <-deadline.C:
			o.hung, o.hungAs, o.hungBy = fmt.Sprintf("it was still running after %s, the deadline of an attempt", w.cfg.deadline), invCompletes, "past its deadline"
			return w.stop(cmd, exited, evs, o, start)
		case <-watchdog.C:
			if why := w.stalled(t, running); why != "" {
				o.hung, o.hungAs, o.hungBy = why, invEtcd, "a cluster without etcd"
				return w.stop(cmd, exited, evs, o, start)
			}
		}
	}
}

// landed says where a kill landed, from all the attempt printed: in the
// steps running then, or after the last one that finished (the planned
// point is a moment; migrate goes on for a few milliseconds before the
// test freezes it).
func landed(events []event) string {
	running, last := map[string]bool{}, ""
	for _, e := range events {
		switch {
		case e.started():
			running[e.Address] = true
		case e.finished():
			delete(running, e.Address)
			last = e.Address
		}
	}
	switch {
	case len(running) > 0:
		return "[in " + strings.Join(slices.Sorted(maps.Keys(running)), ", ") + "]"
	case last != "":
		return "[after " + last + "]"
	}
	return "[before any step]"
}

// stop kills an attempt the test gave up on.
func (w *world) stop(cmd *exec.Cmd, exited chan error, evs *eventLog, o outcome, start time.Time) outcome {
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	o.killed, o.took, o.events = true, time.Since(start), evs.since(0)
	return o
}

// stalled says why a running kubernetes_ready waits for a cluster
// without etcd: its VM was not bootstrapped this pass (the VM is new,
// and kubernetes_ready comes after the bootstrap), or it has waited
// cfg.stall and the VM's etcd does not answer.
func (w *world) stalled(t *testing.T, running map[string]time.Time) string {
	for _, c := range clusters {
		since, ok := running[c.ready]
		if !ok {
			continue
		}
		boots := w.count(t, bootstrapOf(c.vm))
		waited := time.Since(since).Round(time.Second)
		switch {
		case boots == 0:
			return fmt.Sprintf("a cluster without etcd: %s waits (for %s now) for the cluster of the VM %s, made anew this pass and never bootstrapped (0 bootstraps of it this pass; %s is %s)",
				c.ready, waited, c.vm, c.bootstrap, w.stepStatus(t, c.bootstrap))
		case time.Since(since) >= w.cfg.stall && !w.lab.etcdHealthy(t, c.vm, 0):
			return fmt.Sprintf("a cluster without etcd: %s has waited %s for the cluster of the VM %s, whose etcd does not answer (%d bootstrap(s) of it this pass; %s is %s)",
				c.ready, waited, c.vm, boots, c.bootstrap, w.stepStatus(t, c.bootstrap))
		}
	}
	return ""
}

// freezeProbeKill is the planned kill: SIGSTOP, then the same command is
// started beside the frozen one and must be refused (the lock), leaving
// the state's files as they were; then SIGKILL, and every provider
// program migrate started must die with it. False when migrate had
// exited before it was frozen.
func (w *world) freezeProbeKill(t *testing.T, label string, cmd *exec.Cmd, args []string, exited chan error) bool {
	t.Helper()
	pid := cmd.Process.Pid
	select {
	case err := <-exited:
		exited <- err // for the caller
		return false
	default:
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return false
	}
	if !waitProcState(pid, "T", 10*time.Second) {
		return false // a zombie: it ended on its own
	}
	children := childrenOf(pid)

	// migrate takes the lock when it is about to change something, after
	// its plan: frozen while it still plans, it holds none, and a second
	// migrate may go first (the frozen one would then be refused at its
	// lock, the state having changed). The probe is for a holder.
	if w.lockHeld() {
		before := w.stateFiles(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := w.command(ctx, args...).CombinedOutput()
		cancel()
		after := w.stateFiles(t)
		w.expect(t, invRefusal, err != nil && bytes.Contains(out, []byte("state is locked")),
			"%s: a second migrate %s started while the first held the lock was not refused as locked (%v):\n%s", label, strings.Join(args, " "), err, tail(string(out), 15))
		w.expect(t, invRefusal, bytes.Equal(before.state, after.state) && bytes.Equal(before.journal, after.journal),
			"%s: the refused migrate %s changed the state's files (state.json %d -> %d bytes, journal.jsonl %d -> %d bytes)", label, strings.Join(args, " "),
			len(before.state), len(after.state), len(before.journal), len(after.journal))
	}

	syscall.Kill(pid, syscall.SIGKILL)
	<-exited
	var alive []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		alive = alive[:0]
		for _, c := range children {
			if c.alive() {
				alive = append(alive, c.String())
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.expect(t, invNoSurvivor, len(alive) == 0, "%s: processes of the killed migrate outlived it by 10s: %s", label, strings.Join(alive, ", "))
	return true
}

// lockHeld reports whether some process holds the state's lock (flock):
// the test tries to take it without waiting, and lets it go at once.
func (w *world) lockHeld() bool {
	f, err := os.Open(filepath.Join(w.runbook, ".migrate", "lock"))
	if err != nil {
		return false // no lock file: nobody took the lock yet
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// stateFiles are the bytes of the local state (a refused command must
// not change them).
type stateBytes struct{ state, journal []byte }

func (w *world) stateFiles(t *testing.T) stateBytes {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(w.runbook, ".migrate", name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return b
	}
	return stateBytes{read("state.json"), read("journal.jsonl")}
}

// command is migrate with args against the runbook, in the lab's environment.
func (w *world) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, migrateBin(), append(args, "--runbook", w.runbook, "--no-color")...)
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a test that dies leaves no migrate behind
	return cmd
}

// proc is a process, told from a later one with its pid by its start time.
type proc struct {
	pid       int
	starttime string
	comm      string
}

func (p proc) String() string { return fmt.Sprintf("%s (pid %d)", p.comm, p.pid) }

// stat reads /proc/PID/stat: the command, the state letter, the parent
// and the start time.
func stat(pid int) (comm, state string, ppid int, starttime string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", 0, "", false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return "", "", 0, "", false
	}
	f := strings.Fields(s[j+1:]) // f[0] is field 3 (state), f[1] the parent, f[19] field 22 (starttime)
	if len(f) < 20 {
		return "", "", 0, "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return s[i+1 : j], f[0], ppid, f[19], true
}

func (p proc) alive() bool {
	_, state, _, st, ok := stat(p.pid)
	return ok && st == p.starttime && state != "Z" && state != "X"
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []proc {
	var out []proc
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		n, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if comm, _, ppid, st, ok := stat(n); ok && ppid == pid {
			out = append(out, proc{pid: n, starttime: st, comm: comm})
		}
	}
	return out
}

// waitProcState waits for pid to be in state (a letter of /proc/PID/stat);
// false when it is a zombie, gone, or not there by the deadline.
func waitProcState(pid int, state string, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		_, s, _, _, ok := stat(pid)
		switch {
		case !ok || s == "Z" || s == "X":
			return false
		case s == state:
			return true
		case time.Now().After(deadline):
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
