package views

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
)

// RunView shows the progress of a run or a rollback. It is an engine.Hook
// and safe for concurrent use; it never fails the run, so write errors are
// ignored (a closed pipe must not stop a migration half-way).
type RunView interface {
	engine.Hook
	// Start begins periodic flushing or redrawing.
	Start()
	// Finish stops it and writes out everything pending. It may be called
	// more than once.
	Finish()
	// Pause clears the live area so the terminal can ask a question; call
	// the returned function to go on.
	Pause() (resume func())
	// Stopping says an interrupt arrived: the first stops gently, the
	// second (abort) cancels running steps.
	Stopping(abort bool)
	// Summary closes a successful run or rollback with a line of totals.
	Summary()
}

// RunMode selects how progress is shown.
type RunMode int

const (
	// RunPlain writes one line per event, for logs and pipes.
	RunPlain RunMode = iota
	// RunLive redraws running steps with spinners, for a terminal.
	RunLive
	// RunJSON writes one JSON object per event on stdout and nothing else.
	RunJSON
)

// flushEvery is how often buffered progress reaches the output.
const flushEvery = 100 * time.Millisecond

// NewRun makes the progress view of a run (rollback false) or a rollback.
func (v *View) NewRun(mode RunMode, rollback bool) RunView {
	switch mode {
	case RunJSON:
		bw := bufio.NewWriterSize(v.out, 64<<10)
		j := &jsonRun{bw: bw, enc: json.NewEncoder(bw), errw: v.err}
		j.init(rollback)
		j.flusher = newFlusher(j.flushLocked, &j.mu)
		return j
	case RunLive:
		l := &liveRun{w: v.out, st: v.st, width: v.width}
		l.init(rollback)
		l.flusher = newFlusher(l.redrawLocked, &l.mu)
		return l
	}
	p := &plainRun{bw: bufio.NewWriterSize(v.out, 64<<10), st: v.st, errw: v.err}
	p.init(rollback)
	p.flusher = newFlusher(p.flushLocked, &p.mu)
	return p
}

// tally counts what happened to the steps of a phase, or of a whole run.
type tally struct {
	done, failed, skipped, reverted int
	// stopped: ended not done by the first Ctrl-C while they waited.
	stopped int
}

func (t tally) String() string {
	var parts []string
	if t.done > 0 || t.reverted == 0 {
		parts = append(parts, fmt.Sprintf("%d done", t.done))
	}
	if t.reverted > 0 {
		parts = append(parts, fmt.Sprintf("%d undone", t.reverted))
	}
	if t.stopped > 0 {
		parts = append(parts, fmt.Sprintf("%d stopped while waiting", t.stopped))
	}
	parts = append(parts, fmt.Sprintf("%d failed", t.failed), fmt.Sprintf("%d skipped", t.skipped))
	return strings.Join(parts, ", ")
}

// runBase is the bookkeeping every mode shares; callers hold their lock.
type runBase struct {
	mu       sync.Mutex
	rollback bool
	started  time.Time
	phases   map[string]*tally
	total    tally
	// shown keeps the last output lines shown per step, so that an
	// error quoting them does not print them a second time.
	shown map[phases.Address][]string
}

// shownLines is how many output lines per step are kept in shown.
const shownLines = 64

func (b *runBase) init(rollback bool) {
	b.rollback = rollback
	b.started = time.Now()
	b.phases = map[string]*tally{}
	b.shown = map[phases.Address][]string{}
}

// remember notes an output line as shown; a new try starts afresh.
func (b *runBase) remember(e engine.Event) {
	switch e.Kind {
	case engine.StepStarted, engine.StepReverting:
		delete(b.shown, e.Addr)
	case engine.StepOutput:
		l := append(b.shown[e.Addr], strings.TrimSpace(e.Message))
		if len(l) > shownLines {
			l = l[len(l)-shownLines:]
		}
		b.shown[e.Addr] = l
	case engine.StepDone, engine.StepAdopted, engine.StepReverted, engine.StepStopped:
		delete(b.shown, e.Addr)
	}
}

// outputMarker starts the part of an error that quotes the last lines of
// a command's output (providers/local exec).
const outputMarker = "\nLast lines of output:"

// withoutShownOutput cuts from a step's error the output lines that were
// just shown above it, as the step's output: the command's own last
// message would otherwise be printed twice in a row.
func (b *runBase) withoutShownOutput(e engine.Event) string {
	i := strings.Index(e.Error, outputMarker)
	shown := b.shown[e.Addr]
	if i < 0 || len(shown) == 0 {
		return e.Error
	}
	seen := map[string]bool{}
	for _, l := range shown {
		seen[l] = true
	}
	for _, l := range strings.Split(e.Error[i+len(outputMarker):], "\n") {
		l = strings.TrimSpace(l)
		if l != "" && l != "…" && !seen[l] {
			return e.Error // something not shown: keep it all
		}
	}
	return e.Error[:i] + "\n(its output is above)"
}

// begin restarts the clock of the summary: the run starts now, after the
// plan and the question.
func (b *runBase) begin() {
	b.mu.Lock()
	b.started = time.Now()
	b.mu.Unlock()
}

func (b *runBase) count(e engine.Event) {
	t := b.phases[e.Phase]
	if t == nil {
		t = &tally{}
		b.phases[e.Phase] = t
	}
	var f func(*tally)
	switch e.Kind {
	case engine.StepDone, engine.StepAdopted:
		if e.Check {
			return
		}
		f = func(t *tally) { t.done++ }
	case engine.StepFailed, engine.StepRevertFailed:
		f = func(t *tally) { t.failed++ }
	case engine.StepSkipped:
		f = func(t *tally) { t.skipped++ }
	case engine.StepStopped:
		if e.Check {
			return
		}
		f = func(t *tally) { t.stopped++ }
	case engine.StepReverted:
		if e.Check {
			return
		}
		f = func(t *tally) { t.reverted++ }
	default:
		return
	}
	f(t)
	f(&b.total)
}

func (b *runBase) summary() string {
	d := fmtDuration(time.Since(b.started))
	if b.rollback {
		return fmt.Sprintf("Rollback complete: %s undone in %s.", plural(b.total.reverted, "step", "steps"), d)
	}
	return fmt.Sprintf("Run complete: %s done in %s.", plural(b.total.done, "step", "steps"), d)
}

// flusher runs f every flushEvery under mu until stopped.
type flusher struct {
	f    func()
	lk   *sync.Mutex
	quit chan struct{}
	done chan struct{}
	once sync.Once
	run  bool
}

func newFlusher(f func(), mu *sync.Mutex) *flusher {
	return &flusher{f: f, lk: mu, quit: make(chan struct{}), done: make(chan struct{})}
}

func (f *flusher) start() {
	f.lk.Lock()
	if f.run {
		f.lk.Unlock()
		return
	}
	f.run = true
	f.lk.Unlock()
	go func() {
		defer close(f.done)
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-f.quit:
				return
			case <-t.C:
				f.lk.Lock()
				f.f()
				f.lk.Unlock()
			}
		}
	}()
}

// stop ends the ticker and runs f one last time.
func (f *flusher) stop() {
	f.once.Do(func() {
		f.lk.Lock()
		running := f.run
		f.lk.Unlock()
		close(f.quit)
		if running {
			<-f.done
		}
	})
	f.lk.Lock()
	f.f()
	f.lk.Unlock()
}

// plainRun writes a line per event through a buffer flushed periodically,
// so that thousands of events cost thousands of small copies, not
// thousands of system calls.
type plainRun struct {
	runBase
	*flusher
	bw   *bufio.Writer
	st   styles
	errw io.Writer
}

func (p *plainRun) Handle(e engine.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count(e)
	p.bw.WriteString(p.eventLines(p.st, e, false))
	p.remember(e)
	return nil
}

func (p *plainRun) flushLocked() { p.bw.Flush() }
func (p *plainRun) Start()       { p.begin(); p.start() }
func (p *plainRun) Finish()      { p.stop() }
func (p *plainRun) Pause() (resume func()) {
	p.mu.Lock()
	p.bw.Flush()
	p.mu.Unlock()
	return func() {}
}

func (p *plainRun) Stopping(abort bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bw.Flush()
	fmt.Fprintln(p.errw, stoppingMessage(abort))
}

func (p *plainRun) Summary() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bw.WriteString(p.summary() + "\n")
	p.bw.Flush()
}

func stoppingMessage(abort bool) string {
	if abort {
		return "Aborting: cancelling the running steps."
	}
	return "Stopping after the running steps finish (steps that only wait stop now, not done); press Ctrl-C again to abort."
}

// jsonRun writes each event as one JSON object per line on stdout;
// messages for people go to stderr.
type jsonRun struct {
	runBase
	*flusher
	bw   *bufio.Writer
	enc  *json.Encoder
	errw io.Writer
}

func (j *jsonRun) Handle(e engine.Event) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_ = j.enc.Encode(e)
	return nil
}

func (j *jsonRun) flushLocked()           { j.bw.Flush() }
func (j *jsonRun) Start()                 { j.begin(); j.start() }
func (j *jsonRun) Finish()                { j.stop() }
func (j *jsonRun) Pause() (resume func()) { return func() {} }
func (j *jsonRun) Summary()               {}
func (j *jsonRun) Stopping(abort bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintln(j.errw, stoppingMessage(abort))
}

// liveRun redraws, about ten times a second, the steps that are running
// (with a spinner and their elapsed time) below the lines of what has
// finished. Everything goes through one writer, in one Write per redraw.
type liveRun struct {
	runBase
	*flusher
	w       io.Writer
	st      styles
	width   int
	pending bytes.Buffer // finished lines not yet written
	running []*liveStep  // in start order
	drawn   int          // lines of the live area on screen
	frame   int
	paused  bool
	phase   string
}

type liveStep struct {
	addr      phases.Address
	name      string
	started   time.Time
	reverting bool
}

// maxLive is how many running steps the live area lists by name.
const maxLive = 10

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (l *liveRun) Handle(e engine.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(e)
	switch e.Kind {
	case engine.PhaseStarted, engine.PhaseRollbackStarted:
		l.phase = e.Phase
	case engine.StepStarted, engine.StepReverting:
		l.remove(e.Addr)
		l.running = append(l.running, &liveStep{addr: e.Addr, name: stepName(e), started: e.Time, reverting: e.Kind == engine.StepReverting})
	case engine.StepDone, engine.StepFailed, engine.StepRevertFailed, engine.StepAdopted, engine.StepReverted, engine.StepSkipped, engine.StepRetrying, engine.StepStopped:
		l.remove(e.Addr)
	}
	l.pending.WriteString(l.eventLines(l.st, e, true))
	l.remember(e)
	return nil
}

func (l *liveRun) remove(a phases.Address) {
	for i, s := range l.running {
		if s.addr == a {
			l.running = append(l.running[:i], l.running[i+1:]...)
			return
		}
	}
}

// redrawLocked replaces the live area by the pending lines and a fresh
// live area.
func (l *liveRun) redrawLocked() {
	if l.paused {
		return
	}
	var b bytes.Buffer
	l.clearLocked(&b)
	b.Write(l.pending.Bytes())
	l.pending.Reset()
	l.frame++
	lines := l.liveLines(time.Now())
	for _, s := range lines {
		b.WriteString(s)
		b.WriteByte('\n')
	}
	l.drawn = len(lines)
	if b.Len() > 0 {
		_, _ = l.w.Write(b.Bytes())
	}
}

// clearLocked moves the cursor back to the start of the live area and
// erases it.
func (l *liveRun) clearLocked(b *bytes.Buffer) {
	if l.drawn > 0 {
		fmt.Fprintf(b, "\r\x1b[%dA\x1b[J", l.drawn)
		l.drawn = 0
	}
}

func (l *liveRun) liveLines(now time.Time) []string {
	if len(l.running) == 0 {
		return nil
	}
	spin := spinner[l.frame%len(spinner)]
	var out []string
	for i, s := range l.running {
		if i == maxLive {
			out = append(out, l.st.dim(fmt.Sprintf("  … and %d more running", len(l.running)-maxLive)))
			break
		}
		label := s.name
		if s.reverting {
			label += " (reverting)"
		}
		el := fmtDuration(now.Sub(s.started).Truncate(100 * time.Millisecond))
		n := l.width - len(el) - 4
		text := truncate(label, n)
		if s.addr.Group != "" {
			// The step's own address, at the end, says what runs: cut
			// the group call instance before it instead.
			keep := -1
			if j := strings.LastIndex(label, s.addr.Local().String()); j >= 0 {
				keep = utf8.RuneCountInString(label[j:])
			}
			text = truncateBefore(label, n, keep)
		}
		out = append(out, fmt.Sprintf("%s %s %s", l.st.cyan(spin), text, l.st.dim(el)))
	}
	if t := l.phases[l.phase]; t != nil && l.phase != "" {
		out = append(out, l.st.dim(truncate(fmt.Sprintf("  phase %s: %s, %d running", l.phase, t, len(l.running)), l.width-1)))
	}
	return out
}

// truncateBefore is truncate keeping the last keep runes of s whole
// when there is room for them and a few before: the cut is before them.
func truncateBefore(s string, n, keep int) string {
	r := []rune(s)
	if n < 8 {
		n = 8
	}
	if len(r) <= n {
		return s
	}
	if keep < 0 || keep > len(r) || n-keep < 5 {
		return truncate(s, n)
	}
	return string(r[:n-keep-1]) + "…" + string(r[len(r)-keep:])
}

func truncate(s string, n int) string {
	if n < 8 {
		n = 8
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func (l *liveRun) Start() { l.begin(); l.start() }

func (l *liveRun) Finish() {
	l.mu.Lock()
	l.running = nil
	l.paused = false
	l.mu.Unlock()
	l.stop()
}

func (l *liveRun) Pause() (resume func()) {
	l.mu.Lock()
	var b bytes.Buffer
	l.clearLocked(&b)
	b.Write(l.pending.Bytes())
	l.pending.Reset()
	_, _ = l.w.Write(b.Bytes())
	l.paused = true
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.paused = false
		l.mu.Unlock()
	}
}

func (l *liveRun) Stopping(abort bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.WriteString(l.st.yellow(stoppingMessage(abort)) + "\n")
	l.redrawLocked()
}

func (l *liveRun) Summary() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending.WriteString(l.st.green(l.summary()) + "\n")
	l.redrawLocked()
}
