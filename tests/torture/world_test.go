package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/views"
)

// world is the migration under test: the runbook, the lab, and what the
// test knows of the pass it is in.
type world struct {
	cfg     config
	round   int
	root    string
	runbook string
	lab     *lab
	env     []string
	seq     int // attempts so far, for their output files
	tally   *tally

	// The pass: when it started, the lab's events before it, the kills
	// that found a step running (or reverting), the phases it completed
	// and whether its rollback completed.
	pass        int
	passStart   time.Time
	passStarts  []time.Time // of every pass so far
	passEvents  int
	interrupted map[string]int // "run STEP" or "revert STEP"
	completed   map[string]bool
	inRollback  bool // the rollback has started
	rolledBack  bool
	where       string // the attempt being checked, for messages
	// firstStart is when each step first started in this pass, killed
	// attempts included (their --json events).
	firstStart map[string]time.Time
}

func newWorld(t *testing.T, cfg config, round int, tally *tally) *world {
	t.Helper()
	root, err := os.MkdirTemp("", "migrate-torture-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the test's files stay in %s: the runbook and its state (homelab/), every attempt's output (out/), the lab (lab/, its events in lab/%s) and its log (lab.log)", root, home.EventsFile)
			return
		}
		os.RemoveAll(root)
	})
	w := &world{cfg: cfg, round: round, root: root, runbook: filepath.Join(root, "homelab"), tally: tally}
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyTracked(t, "../../examples/homelab", w.runbook)
	w.lab = startLab(t, root)
	w.env = append(os.Environ(), w.lab.env...)
	w.env = append(w.env,
		"MIGRATE_AGE_IDENTITY="+filepath.Join(w.runbook, "secrets", "demo-identity.txt"),
		"MIGRATE_VAR_federation_wait=15s")
	return w
}

func (w *world) beginPass(t *testing.T, pass int) {
	w.pass, w.passStart = pass, time.Now()
	w.passStarts = append(w.passStarts, w.passStart)
	w.passEvents = len(w.lab.events(t, 0))
	w.interrupted, w.completed, w.inRollback, w.rolledBack = map[string]int{}, map[string]bool{}, false, false
	w.firstStart = map[string]time.Time{}
}

// noteStarts keeps the first start of each step in this pass.
func (w *world) noteStarts(events []event) {
	for _, e := range events {
		if _, seen := w.firstStart[e.Address]; e.Kind == "step_started" && !seen {
			w.firstStart[e.Address] = e.Time
		}
	}
}

// status is migrate status --json; migrate state show --json must parse too.
type status struct {
	Serial uint64 `json:"serial"`
	Phases []struct {
		Name   string       `json:"name"`
		Status string       `json:"status"`
		Steps  []stepStatus `json:"steps"`
	} `json:"phases"`

	Services []serviceStatus `json:"services"`
}

// serviceStatus is a service's window as migrate status --json says it.
type serviceStatus struct {
	Name         string     `json:"name"`
	Stops        []string   `json:"stops"`
	Serving      string     `json:"serving"`
	DownSince    *time.Time `json:"down_since"`
	ServingSince *time.Time `json:"serving_since"`
}

type stepStatus struct {
	Address    string     `json:"address"`
	Status     string     `json:"status"`
	FinishedAt *time.Time `json:"finished_at"`
	LastError  string     `json:"last_error"`
}

func (st *status) step(addr string) stepStatus {
	for _, ph := range st.Phases {
		for _, s := range ph.Steps {
			if s.Address == addr {
				return s
			}
		}
	}
	return stepStatus{Address: addr, Status: "absent from migrate status"}
}

func (st *status) phase(name string) string {
	for _, ph := range st.Phases {
		if ph.Name == name {
			return ph.Status
		}
	}
	return "absent from migrate status"
}

// readStatus reads the state through the CLI, as a person would; the
// state must always be readable.
func (w *world) readStatus(t *testing.T) *status {
	t.Helper()
	var st status
	for _, args := range [][]string{{"status", "--json"}, {"state", "show", "--json"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := w.command(ctx, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		var v any = &st
		if args[0] == "state" {
			v = new(map[string]any)
		}
		if err == nil {
			err = json.Unmarshal(out, v)
		}
		if !w.expect(t, invReadable, err == nil, "migrate %s: %v\n%s%s", strings.Join(args, " "), err, tail(string(out), 10), stderr.String()) {
			t.FailNow()
		}
	}
	return &st
}

// stepStatus says a step's status and when it finished, against the
// pass: a record of an earlier pass is of the world before the rollback.
func (w *world) stepStatus(t *testing.T, addr string) string {
	return w.recorded(w.readStatus(t).step(addr))
}

func (w *world) recorded(s stepStatus) string {
	switch {
	case s.FinishedAt == nil:
		return s.Status
	case s.FinishedAt.Before(w.passStart):
		by := 0
		for i, start := range w.passStarts {
			if !s.FinishedAt.Before(start) {
				by = i + 1
			}
		}
		return fmt.Sprintf("%s, recorded at %s by pass %d, in a world since rolled back (this pass began at %s)", s.Status, when(s.FinishedAt), by, w.passStart.Format("15:04:05"))
	}
	return fmt.Sprintf("%s (finished %s)", s.Status, when(s.FinishedAt))
}

// doneThisPass: the step is recorded done by a command of this pass.
func (w *world) doneThisPass(s stepStatus) bool {
	return s.Status == "done" && s.FinishedAt != nil && !s.FinishedAt.Before(w.passStart)
}

// count is how many of this pass's lab events match.
func (w *world) count(t *testing.T, match func(home.Event) bool) int {
	n := 0
	for _, e := range w.lab.events(t, w.passEvents) {
		if match(e) {
			n++
		}
	}
	return n
}

// runCommand is one command of a pass (a phase's run, or the rollback),
// killed n times at seeded points and run again until it exits 0; false
// when it could not be completed (the test stops there).
func (w *world) runCommand(t *testing.T, stats *commandStats, n int, args ...string) bool {
	t.Helper()
	w.inRollback = stats.name == "rollback"
	points := w.killPoints(t, stats, n)
	failures := 0
	for attempt := 1; ; attempt++ {
		var plan *killPlan
		if attempt <= len(points) {
			plan = w.stillAhead(t, stats.name, points[attempt-1])
		}
		label := fmt.Sprintf("round %d pass %d %s attempt %d", w.round, w.pass, stats.name, attempt)
		o := w.attempt(t, label, args, plan)
		w.noteStarts(o.events)
		stats.attempts, stats.resumes = attempt, attempt-1
		stats.took += o.took
		w.where = label
		switch {
		case o.hung != "":
			w.expect(t, o.hungAs, false, "%s: migrate %s was stopped by the test: %s\n%s", label, strings.Join(args, " "), o.hung, o.printed())
			w.expect(t, invCompletes, false, "%s: %s cannot complete: the round stops here", label, stats.name)
			stats.result = "stopped by the test: " + o.hungBy
			return false
		case o.killed:
			stats.kills++
			stats.points = append(stats.points, o.at)
			t.Logf("%s: killed %s (%s in)", label, o.at, o.took.Round(100*time.Millisecond))
			w.noteInterrupted(t)
			w.checkWorld(t)
			if stats.kills == 1 {
				w.probeOutOfOrder(t, stats.name, o.at)
			}
			continue
		case o.err != nil:
			failures++
			stats.failures++
			w.expect(t, invCompletes, false, "%s: migrate %s failed on its own (%v), %s in\n%s", label, strings.Join(args, " "), o.err, o.took.Round(100*time.Millisecond), o.printed())
			w.checkWorld(t)
			if failures == 3 {
				stats.result = "failed 3 times on its own"
				return false
			}
			// The test is red already; the same command again, a moment
			// later, as a person would try it: does it resume, and what
			// does the rest of the pass show?
			time.Sleep(time.Duration(failures) * 2 * time.Second)
			continue
		}
		t.Logf("%s: finished (%s)", label, o.took.Round(100*time.Millisecond))
		if stats.name == "rollback" {
			w.rolledBack = true
		} else {
			w.completed[stats.name] = true
		}
		w.checkWorld(t)
		w.checkCompleted(t, stats.name)
		stats.result = "ok"
		return true
	}
}

// probeOutOfOrder runs, while phase is left incomplete by a kill, the
// phase after it: it must be refused ("earlier phases must be
// complete"), and change nothing: the state as migrate status shows it
// (its serial, every record) and the lab's world (no event).
func (w *world) probeOutOfOrder(t *testing.T, phase, killedAt string) {
	t.Helper()
	next := nextPhase(phase)
	if next == nil {
		return
	}
	// The killed run's last requests may still be taking effect: a Job
	// it created has its pod made by the controller and run by the lab
	// seconds later on a busy machine. Those are its effects, not the
	// refusal's: the probe starts on a quiet lab, quiet for longer when
	// a Job was being run at the kill.
	// A kill after the phase's last step was recorded leaves it complete
	// (the phase is its records): then the next phase is no longer out of
	// order, and there is no refusal to probe.
	before := w.statusJSON(t)
	var st views.Status
	if err := json.Unmarshal([]byte(before), &st); err != nil {
		t.Fatalf("migrate status --json: %v", err)
	}
	for _, ph := range st.Phases {
		if ph.Name == phase && ph.Status == views.PhaseComplete {
			t.Logf("%s: %s was complete when killed: no out-of-order probe", w.where, phase)
			return
		}
	}
	calm := 2 * time.Second
	if strings.Contains(killedAt, "kubernetes_job.") {
		calm = 10 * time.Second
	}
	events := w.lab.quiet(t, calm, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	out, err := w.command(ctx, append([]string{"run", "--phase", next.name, "--auto-approve"}, next.flags...)...).CombinedOutput()
	cancel()
	w.expect(t, invRefusal, err != nil && strings.Contains(string(out), "not complete"),
		"%s: migrate run --phase %s while %s is not complete was not refused as out of order (%v):\n%s", w.where, next.name, phase, err, tail(string(out), 15))
	after, added := w.statusJSON(t), w.lab.events(t, events)
	w.expect(t, invRefusal, before == after && len(added) == 0,
		"%s: the refused migrate run --phase %s changed the state (migrate status --json differs: %v) or the lab's world (%d events before, %d after: %s)", w.where, next.name, before != after, events, events+len(added), describeEvents(added))
}

// statusJSON is what migrate status --json prints.
func (w *world) statusJSON(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := w.command(ctx, "status", "--json").Output()
	if err != nil {
		t.Fatalf("migrate status --json: %v", err)
	}
	return string(out)
}

// stillAhead is the kill point, or a delay after the start in its place
// when its step is no longer to do (an earlier attempt got past it).
func (w *world) stillAhead(t *testing.T, name string, p killPlan) *killPlan {
	if p.addr != "" && !slices.Contains(w.stepsToDo(t, name), p.addr) {
		p = killPlan{delay: 300*time.Millisecond + p.delay}
	}
	return &p
}

// noteInterrupted counts, after a kill, the steps it found running or
// reverting: each may do its effect once more (a step without a way to
// observe its effect is redone).
func (w *world) noteInterrupted(t *testing.T) {
	st := w.readStatus(t)
	for _, ph := range st.Phases {
		for _, s := range ph.Steps {
			switch s.Status {
			case "running":
				w.interrupted["run "+s.Address]++
			case "reverting":
				w.interrupted["revert "+s.Address]++
			}
		}
	}
}

// killPoints are the kills of a command: n, or one per 5 steps of a
// phase when it has more (the rehearsal's and ingress-matrix's last
// steps deserve kills of their own); none when n is 0. Kill i aims at a
// step of the i-th part of the steps the command has to run (or revert),
// at its start or its end, plus 1 ms to 1.5 s; the first kill is, one
// time in three, a plain delay of 20 ms to 5 s after the start instead
// (the plan, the first steps in flight). Seeded by the test's seed, the round, the pass
// and the command alone, so that a kill point does not depend on how
// earlier commands went.
func (w *world) killPoints(t *testing.T, stats *commandStats, n int) []killPlan {
	if n == 0 {
		return nil
	}
	rng := seeded(w.cfg.seed, w.round, w.pass, stats.name)
	todo := w.stepsToDo(t, stats.name)
	if stats.name != "rollback" {
		n = max(n, (len(todo)+4)/5)
	}
	var out []killPlan
	for i := range n {
		delay := logUniform(rng, time.Millisecond, 1500*time.Millisecond)
		if len(todo) == 0 || i == 0 && rng.IntN(3) == 0 {
			out = append(out, killPlan{delay: logUniform(rng, 20*time.Millisecond, 5*time.Second)})
			continue
		}
		lo, hi := i*len(todo)/n, (i+1)*len(todo)/n
		if hi <= lo {
			hi = lo + 1
		}
		at := lo + rng.IntN(hi-lo)
		// the end of the last step is the end of the command: its start
		out = append(out, killPlan{addr: todo[at], done: at < len(todo)-1 && rng.IntN(2) == 0, delay: delay})
	}
	return out
}

// logUniform draws a delay between lo and hi, as many short ones (a kill
// a few milliseconds after a step started catches it in flight: the
// lab's steps are quick) as long ones.
func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64()))
}

// stepsToDo are the steps the command has to run, in the runbook's order
// (a phase), or to revert, in the order a rollback takes (every phase,
// the last first).
func (w *world) stepsToDo(t *testing.T, name string) []string {
	st := w.readStatus(t)
	var out []string
	for _, ph := range st.Phases {
		for _, s := range ph.Steps {
			switch {
			case name == "rollback" && s.Status == "done":
				out = append(out, s.Address)
			case ph.Name == name && s.Status != "done":
				out = append(out, s.Address)
			}
		}
	}
	if name == "rollback" {
		slices.Reverse(out)
	}
	return out
}
