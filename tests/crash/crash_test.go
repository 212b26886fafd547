// Package crash kills a real migrate process with SIGKILL at random moments,
// during run and during rollback, resumes until it is done, and checks the
// promises of issue 2 ("Interrupts", "Tests"):
//
//   - the state always parses (status --json and state show --json);
//   - a step recorded as done never runs again, and a step recorded as
//     reverted is never reverted again;
//   - a step runs again only if a kill found it recorded as running (and
//     its revert only if a kill found it recorded as reverting): the number
//     of times it started is at most 1 + the number of such kills;
//   - steps with an observable effect (creates) made it exactly once, and
//     rollback removed it exactly once;
//   - every step ran, and every revertible step was reverted;
//   - no process a step started (nor its background grandchild) outlives
//     a kill of migrate by more than a second;
//   - the lock file a killed migrate leaves behind does not stop the next
//     run (the kernel drops the flock).
//
// The seed is logged; CRASH_SEED=N reruns the same kill times.
package crash_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
	"github.com/homelab-migrate/migrate/views"
)

var migrateBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "crashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	migrateBin = filepath.Join(dir, "migrate")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	build := exec.Command(gobin, "build", "-o", migrateBin, "github.com/homelab-migrate/migrate/cmd/migrate")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building migrate:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// kind is what a generated step does besides running.
type kind int

const (
	// onceRevertible: creates = its effect (a directory made atomically
	// at the end with mkdir, so a second completion is seen), and a revert
	// that moves it away with one rename (a second removal is seen too);
	// where it went is the revert's revert_creates, so a revert killed
	// after the rename is not run again.
	onceRevertible kind = iota
	// onceOnly: creates, no revert: rollback leaves it.
	onceOnly
	// repeatable: no creates (the engine cannot observe it, so a step
	// interrupted while running is run again); its effect is an idempotent
	// file, and its revert an idempotent rm -f.
	repeatable
)

type step struct {
	name  string
	phase string
	kind  kind
	deps  []string
	ms    int // how long the command sleeps
	bg    bool
}

func (s step) addr() string { return "exec." + s.name }

// world is one generated runbook and the directories its commands write.
type world struct {
	root, runbook string
	steps         []step
	migratePIDs   map[int]bool    // every migrate run or rollback started
	orphans       map[string]bool // pid files already reported
	// etcd: the runbook keeps its state in etcd (a backend block), whose
	// lock is a lease that outlives a killed holder by its TTL.
	etcd bool
}

func (w *world) path(parts ...string) string {
	return filepath.Join(append([]string{w.root}, parts...)...)
}

// newWorld makes three phases of parallel chains of steps, with edges
// across chains, each step sleeping 20-80 ms.
// backend, when not empty, is a backend block put in the runbook.
func newWorld(t *testing.T, rng *rand.Rand, backend string) *world {
	w := &world{root: t.TempDir(), migratePIDs: map[int]bool{}, orphans: map[string]bool{}, etcd: backend != ""}
	w.runbook = w.path("runbook")
	for _, d := range []string{"runbook", "pids", "runs", "effects", "reverts", "removed"} {
		if err := os.MkdirAll(w.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	b.WriteString(backend)
	n := 0
	for _, ph := range []struct {
		name  string
		steps int
		width int
	}{{"prepare", 9, 3}, {"migrate", 16, 4}, {"finish", 9, 3}} {
		fmt.Fprintf(&b, "phase %q {\n", ph.name)
		var names []string
		for i := 0; i < ph.steps; i++ {
			s := step{name: fmt.Sprintf("%s_%02d", ph.name, i), phase: ph.name, kind: kind(n % 3), ms: 20 + rng.IntN(61), bg: n%4 == 1}
			if i >= ph.width {
				s.deps = append(s.deps, names[i-ph.width]) // its own chain
				if i%2 == 0 {
					// and the chain beside it, one level up
					j := i - ph.width + 1
					if i%ph.width == ph.width-1 {
						j = i - ph.width - 1
					}
					s.deps = append(s.deps, names[j])
				}
			}
			names = append(names, s.name)
			w.steps = append(w.steps, s)
			b.WriteString(w.hcl(s))
			n++
		}
		b.WriteString("}\n")
	}
	if err := os.WriteFile(filepath.Join(w.runbook, "main.hcl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// recordPID is shell that writes "PID STARTTIME" of the shell running it,
// its parent's pid and its PID namespace into pids/TAG.PID. /proc/self is read by the shell itself (a redirection
// of the read builtin), and /proc is the host's, so the pid is the host's
// even inside the step's PID namespace; the start time tells a reused pid.
func (w *world) recordPID(tag string) string {
	var x strings.Builder
	for i := 0; i < 20; i++ {
		x.WriteString(" x")
	}
	return fmt.Sprintf(`read -r pid comm state ppid%s st rest < /proc/self/stat; ns=$(readlink /proc/self/ns/pid 2>/dev/null || echo none); echo "$pid $st $ppid $ns" > %s.$pid; `, x.String()[:len(x.String())-6], w.path("pids", tag))
}

func (w *world) hcl(s step) string {
	sleep := fmt.Sprintf("sleep 0.%03d; ", s.ms)
	run := w.recordPID(s.name) + "echo start >> " + w.path("runs", s.name+".log") + "; "
	if s.bg {
		// A grandchild that would outlive the step if nothing killed it.
		run += "sh -c '" + strings.ReplaceAll(w.recordPID(s.name+".bg"), "'", "") + "exec sleep 30' >/dev/null 2>&1 & "
	}
	run += sleep
	effect := w.path("effects", s.name)
	var b strings.Builder
	fmt.Fprintf(&b, "  step \"exec\" %q {\n", s.name)
	switch s.kind {
	case onceRevertible, onceOnly:
		run += fmt.Sprintf("mkdir %s 2>/dev/null || echo %s >> %s", effect, s.name, w.path("dups"))
		fmt.Fprintf(&b, "    creates = %q\n", effect)
	case repeatable:
		run += "touch " + effect
	}
	fmt.Fprintf(&b, "    command = [\"sh\", \"-c\", %q]\n", run)
	rev := w.recordPID(s.name+".revert") + "echo revert >> " + w.path("reverts", s.name+".log") + "; " + sleep
	switch s.kind {
	case onceRevertible:
		removed := w.path("removed", s.name)
		rev += fmt.Sprintf("mv %s %s 2>/dev/null || echo %s >> %s", effect, removed, s.name, w.path("revdups"))
		fmt.Fprintf(&b, "    revert = [\"sh\", \"-c\", %q]\n", rev)
		fmt.Fprintf(&b, "    revert_creates = %q\n", removed)
	case repeatable:
		rev += "rm -f " + effect
		fmt.Fprintf(&b, "    revert = [\"sh\", \"-c\", %q]\n", rev)
	}
	if len(s.deps) > 0 {
		refs := make([]string, len(s.deps))
		for i, d := range s.deps {
			refs[i] = "exec." + d
		}
		fmt.Fprintf(&b, "    depends_on = [%s]\n", strings.Join(refs, ", "))
	}
	b.WriteString("  }\n")
	return b.String()
}

// lines counts the lines of a log under runs/ or reverts/.
func (w *world) lines(t *testing.T, dir, name string) int {
	data, err := os.ReadFile(w.path(dir, name+".log"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func (w *world) exists(name string) bool {
	_, err := os.Stat(w.path("effects", name))
	return err == nil
}

func (w *world) fileLines(t *testing.T, name string) []string {
	data, err := os.ReadFile(w.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// statuses reads the state through the CLI: status --json must parse, and
// state show --json gives every record's status.
func (w *world) statuses(t *testing.T) map[string]string {
	t.Helper()
	out, errOut, err := w.migrate("status", "--json")
	if err != nil {
		t.Fatalf("migrate status --json: %v\n%s", err, errOut)
	}
	var st views.Status // what migrate status --json prints
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("migrate status --json does not parse: %v\n%s", err, out)
	}
	out, errOut, err = w.migrate("state", "show", "--json")
	if err != nil {
		t.Fatalf("migrate state show --json: %v\n%s", err, errOut)
	}
	var show struct {
		State struct {
			Steps map[string]struct {
				Status string `json:"status"`
			} `json:"steps"`
		} `json:"state"`
	}
	if err := json.Unmarshal(out, &show); err != nil {
		t.Fatalf("migrate state show --json does not parse: %v\n%s", err, out)
	}
	res := map[string]string{}
	for addr, r := range show.State.Steps {
		res[addr] = r.Status
	}
	// The two views must agree.
	for _, ph := range st.Phases {
		for _, s := range ph.Steps {
			if got := res[s.Addr.String()]; got != string(s.Status) && !(got == "" && s.Status == "pending") {
				t.Errorf("status --json says %s is %s, state show --json says %q", s.Addr, s.Status, got)
			}
		}
	}
	return res
}

func (w *world) migrate(args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(migrateBin, append(args, "--runbook", w.runbook, "--no-color")...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}

// proc is a process a step recorded.
type proc struct {
	file      string
	pid       int
	starttime string
	ppid      int    // when it started
	pidns     string // its PID namespace ("pid:[N]")
}

func (w *world) recordedProcs(t *testing.T) []proc {
	entries, err := os.ReadDir(w.path("pids"))
	if err != nil {
		t.Fatal(err)
	}
	var out []proc
	for _, e := range entries {
		data, err := os.ReadFile(w.path("pids", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(data))
		if len(f) != 4 {
			continue // being written by a process that is still alive: the next look sees it
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("%s: %q", e.Name(), data)
		}
		ppid, _ := strconv.Atoi(f[2])
		out = append(out, proc{file: e.Name(), pid: pid, starttime: f[1], ppid: ppid, pidns: f[3]})
	}
	return out
}

// alive: the process is running (a zombie is dead; a pid with another
// start time is another process).
func (p proc) alive() bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state), f[19] field 22 (starttime)
	if len(f) < 20 || f[19] != p.starttime {
		return false
	}
	return f[0] != "Z" && f[0] != "X"
}

// assertNoSurvivors fails when a process a step recorded is alive a second
// after migrate died.
func (w *world) assertNoSurvivors(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		var alive []string
		for _, p := range w.recordedProcs(t) {
			if !strings.Contains(p.file, ".bg.") && !w.migratePIDs[p.ppid] && !w.orphans[p.file] {
				// Its parent was not a migrate process: its first line ran
				// after the migrate that forked it had died (forked an
				// instant before the kill, it was orphaned before it ran).
				// That is allowed only because the kernel kills it with
				// the step PID namespace whose holder dies with migrate:
				// it must be gone by the deadline below like any other.
				// (A command outside a namespace would keep running, and
				// fail that check.)
				w.orphans[p.file] = true
				if own, _ := os.Readlink("/proc/self/ns/pid"); p.pidns == own || p.pidns == "none" {
					t.Errorf("%s: %s (pid %d) started with parent %d, not a migrate process, outside a step PID namespace: it ran after its migrate was killed, unsupervised", when, p.file, p.pid, p.ppid)
				} else {
					t.Logf("%s: %s (pid %d) reached its first line after its migrate died (parent %d); it must die with its namespace", when, p.file, p.pid, p.ppid)
				}
			}
			if p.alive() {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", p.file, p.pid))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes started by steps outlived migrate: %s", when, strings.Join(alive, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockHolder returns the pid recorded in the state's lock file (in etcd:
// of the lock's holder), 0 if none.
func (w *world) lockHolder(t *testing.T) int {
	if w.etcd {
		out, errOut, err := w.migrate("state", "show", "--json")
		var doc struct {
			Lock *struct {
				PID int `json:"pid"`
			} `json:"lock"`
		}
		if err != nil || json.Unmarshal(out, &doc) != nil {
			t.Fatalf("migrate state show --json: %v\n%s%s", err, out, errOut)
		}
		if doc.Lock == nil {
			return 0
		}
		return doc.Lock.PID
	}
	data, err := os.ReadFile(filepath.Join(w.runbook, ".migrate", "lock"))
	if err != nil {
		return 0
	}
	var info struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal(data, &info) != nil {
		return 0
	}
	return info.PID
}

// startKill starts migrate with args, kills it with SIGKILL after d unless
// it exits first, and reports whether it was killed.
func (w *world) startKill(t *testing.T, iter int, d time.Duration, args ...string) (killed bool, pid int) {
	t.Helper()
	logs := w.path(fmt.Sprintf("migrate-%02d", iter))
	stdout, err := os.Create(logs + ".out")
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(logs + ".err")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(migrateBin, append(args, "--runbook", w.runbook, "--no-color")...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.migratePIDs[cmd.Process.Pid] = true
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps migrate: it never lingers as our zombie
	select {
	case err := <-exited:
		if err != nil {
			out, _ := os.ReadFile(logs + ".out")
			errOut, _ := os.ReadFile(logs + ".err")
			t.Fatalf("migrate %s (attempt %d) failed on its own: %v\nstdout:\n%s\nstderr:\n%s\nprocesses with the state lock open: %s",
				strings.Join(args, " "), iter, err, out, errOut, openers(filepath.Join(w.runbook, ".migrate", "lock")))
		}
		return false, cmd.Process.Pid
	case <-time.After(d):
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	err = <-exited
	var ee *exec.ExitError
	if err == nil {
		return false, cmd.Process.Pid // it finished just before the signal
	}
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		errOut, _ := os.ReadFile(logs + ".err")
		t.Fatalf("migrate %s (attempt %d): %v\n%s", strings.Join(args, " "), iter, err, errOut)
	}
	return true, cmd.Process.Pid
}

// openers lists the processes that have path open, to explain a lock
// that a dead process seems to hold.
func openers(path string) string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, _ := os.ReadDir(filepath.Join(p, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(p, "fd", fd.Name())); err == nil && l == path {
				stat, _ := os.ReadFile(filepath.Join(p, "stat"))
				cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				out = append(out, fmt.Sprintf("\n  %s fd %s: %q stat: %s", p, fd.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), stat))
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "")
}

// tracker keeps what the kills saw, to check the logs against it.
type tracker struct {
	w *world
	// finalAt: for steps once seen done (run) or reverted (rollback), the
	// number of lines of their log then; it must never grow.
	finalAt map[string]int
	// interrupted counts, per step, the kills after which it was
	// recorded as running (or reverting): each allows one more start.
	interrupted map[string]int
}

func newTracker(w *world) *tracker {
	return &tracker{w: w, finalAt: map[string]int{}, interrupted: map[string]int{}}
}

// observe checks the logs against what earlier kills saw and records what
// this one sees. final and busy are the statuses that mean finished and
// interrupted; dir is the log directory (runs or reverts).
func (tr *tracker) observe(t *testing.T, st map[string]string, dir, final, busy string) {
	t.Helper()
	for _, s := range tr.w.steps {
		n := tr.w.lines(t, dir, s.name)
		if at, ok := tr.finalAt[s.name]; ok && n != at {
			t.Errorf("%s was recorded %s when its %s log had %d line(s); it has %d now: it %s again", s.addr(), final, dir, at, n, map[string]string{"runs": "ran", "reverts": "was reverted"}[dir])
		}
		switch st[s.addr()] {
		case final:
			if _, ok := tr.finalAt[s.name]; !ok {
				tr.finalAt[s.name] = n
			}
		case busy:
			tr.interrupted[s.name]++
		}
	}
}

// loop runs migrate with args, killing it at random moments, until it
// exits 0; after every kill it checks the state and the processes.
func loop(t *testing.T, w *world, rng *rand.Rand, name string, observe func(st map[string]string), args ...string) {
	var kills, staleLocks int
	for iter := 1; ; iter++ {
		if iter > 100 {
			t.Fatalf("%s did not finish after %d attempts", name, iter-1)
		}
		holder := w.lockHolder(t)
		if w.etcd && holder != 0 {
			// The killed holder's lease lives on until its TTL: a run
			// now would be refused (as it should). Wait for it to go.
			if !w.migratePIDs[holder] {
				t.Fatalf("the lock is held by pid %d, not a migrate this test started", holder)
			}
			deadline := time.Now().Add(60 * time.Second)
			for w.lockHolder(t) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the lease of killed pid %d did not expire within 60s", holder)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		d := time.Duration(50+rng.IntN(351)) * time.Millisecond

		killed, pid := w.startKill(t, iter, d, args...)
		if holder != 0 && holder != pid {
			// It started although a killed process left its lock file.
			staleLocks++
		}
		what := fmt.Sprintf("%s attempt %d (killed after %s)", name, iter, d)
		if !killed {
			what = fmt.Sprintf("%s attempt %d (finished)", name, iter)
		}
		w.assertNoSurvivors(t, what)
		st := w.statuses(t)
		observe(st)
		if t.Failed() {
			t.FailNow()
		}
		if !killed {
			t.Logf("%s: finished at attempt %d after %d kills; %d runs started over a lock left by a killed process", name, iter, kills, staleLocks)
			if kills > 0 && staleLocks == 0 {
				t.Errorf("%s: no run started over a killed process's lock file: the lock was not exercised", name)
			}
			return
		}
		kills++
	}
}

// TestKillAndResume plays the whole scenario (run killed until done,
// rollback killed until done) several times with different seeds: each
// round is a few seconds, and more rounds reach more kill moments.
func TestKillAndResume(t *testing.T) {
	seeds := []uint64{uint64(time.Now().UnixNano())}
	for len(seeds) < 3 {
		seeds = append(seeds, seeds[len(seeds)-1]*6364136223846793005+1442695040888963407)
	}
	if s := os.Getenv("CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED: %v", err)
		}
		seeds = []uint64{seed}
	}
	for i, seed := range seeds {
		t.Run(fmt.Sprintf("round-%d", i+1), func(t *testing.T) { killAndResume(t, seed, "") })
	}
}

// TestKillAndResumeEtcd is the same scenario with the state in etcd
// (issue 13): every attempt is a new process, as another machine would
// be, and a killed holder's lock goes only when its lease (lock_ttl 2s)
// expires. One round: each kill costs a lease.
func TestKillAndResumeEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cfg := c.Config()
	var eps []string
	for _, e := range cfg.Endpoints {
		eps = append(eps, strconv.Quote(e))
	}
	backend := fmt.Sprintf("backend \"etcd\" {\n  endpoints = [%s]\n  prefix    = %q\n  lock_ttl  = \"2s\"\n}\n", strings.Join(eps, ", "), cfg.Prefix)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CRASH_SEED: %v", err)
		}
	}
	killAndResume(t, seed, backend)
}

func killAndResume(t *testing.T, seed uint64, backend string) {
	t.Logf("seed %d (rerun with CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := newWorld(t, rng, backend)
	defer func() {
		if t.Failed() {
			t.Logf("runbook:\n%s", must(os.ReadFile(filepath.Join(w.runbook, "main.hcl"))))
		}
	}()

	// Run, killed at random moments, until it completes.
	runs := newTracker(w)
	loop(t, w, rng, "run", func(st map[string]string) {
		runs.observe(t, st, "runs", "done", "running")
	}, "run", "--all", "--auto-approve")

	st := w.statuses(t)
	for _, s := range w.steps {
		n := w.lines(t, "runs", s.name)
		switch {
		case st[s.addr()] != "done":
			t.Errorf("%s is %q after a complete run, want done", s.addr(), st[s.addr()])
		case !w.exists(s.name):
			t.Errorf("%s is done but its effect is missing", s.addr())
		case n < 1:
			t.Errorf("%s is done but never started", s.addr())
		case n > 1+runs.interrupted[s.name]:
			t.Errorf("%s started %d times, but only %d kill(s) found it running", s.addr(), n, runs.interrupted[s.name])
		}
	}
	if d := w.fileLines(t, "dups"); len(d) > 0 {
		t.Errorf("steps with creates completed more than once: %v", d)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Roll back, killed at random moments, until it completes.
	ranBefore := map[string]int{}
	for _, s := range w.steps {
		ranBefore[s.name] = w.lines(t, "runs", s.name)
	}
	reverts := newTracker(w)
	loop(t, w, rng, "rollback", func(st map[string]string) {
		for _, s := range w.steps {
			if n := w.lines(t, "runs", s.name); n != ranBefore[s.name] {
				t.Errorf("%s ran during the rollback", s.addr())
			}
		}
		reverts.observe(t, st, "reverts", "reverted", "reverting")
	}, "rollback", "--auto-approve")

	st = w.statuses(t)
	for _, s := range w.steps {
		n := w.lines(t, "reverts", s.name)
		if s.kind == onceOnly {
			if st[s.addr()] != "done" || !w.exists(s.name) || n != 0 {
				t.Errorf("%s has no revert: want it done with its effect and never reverted, got %q, effect %v, %d revert(s)", s.addr(), st[s.addr()], w.exists(s.name), n)
			}
			continue
		}
		switch {
		case st[s.addr()] != "reverted":
			t.Errorf("%s is %q after a complete rollback, want reverted", s.addr(), st[s.addr()])
		case w.exists(s.name):
			t.Errorf("%s is reverted but its effect is still there", s.addr())
		case n < 1:
			t.Errorf("%s is reverted but its revert never ran", s.addr())
		case n > 1+reverts.interrupted[s.name]:
			t.Errorf("%s was reverted %d times, but only %d kill(s) found it reverting", s.addr(), n, reverts.interrupted[s.name])
		}
	}
	if d := w.fileLines(t, "revdups"); len(d) > 0 {
		t.Errorf("effects removed more than once (a revert ran after its effect was gone): %v", d)
	}
}

func must(b []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	return string(b)
}
