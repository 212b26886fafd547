package engine

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// ServicePlan is a service's window of downtime as the plan expects it:
// the longest path of steps from the start of its stop to its serving
// check, each step with how long it is expected to take and why.
type ServicePlan struct {
	Name string `json:"name"`
	// Expected is the window the plan expects.
	Expected time.Duration `json:"expected_ns"`
	// Max is the runbook's max_downtime; 0: none.
	Max   time.Duration  `json:"max_downtime_ns,omitempty"`
	Terms []EstimateTerm `json:"terms"`
}

// EstimateTerm is one step of the window's longest path.
type EstimateTerm struct {
	Addr     phases.Address `json:"address"`
	Expected time.Duration  `json:"expected_ns"`
	// Basis says where the figure comes from: measured (on this host,
	// from the state's records), planned (bytes the plan read, at a
	// measured rate), or assumed.
	Basis string `json:"basis"`
}

// Copy steps say, in their plan, how many bytes they will copy
// (providers.PlanResponse.CopyBytes) and, once done, in their outputs
// or facts, how many they copied in how long (CopiedBytes, CopySeconds;
// a rehearsal's Job that measured the data volume, in its facts): the
// estimate divides the one by the rate of the others.
const (
	CopiedBytes = "copied_bytes"
	CopySeconds = "seconds"
)

const (
	// assumedStep is a step's expected duration when nothing of its
	// provider has run on this host yet.
	assumedStep = 10 * time.Second
	// assumedRate is the copy rate when no copy has run here yet.
	assumedRate = 50 << 20 // bytes per second
	// minMeasuredCopy: smaller copies say little of the rate.
	minMeasuredCopy = 1 << 20
)

// estimateServices expects each service's window that the plan's phases
// open (a stop step not done yet): the longest path, by expected
// durations, through the steps that may run after its first stop step
// starts (that phase's steps that are not needed by the stop, then the
// whole of each later phase up to its serving check's), plus that check.
// A window over its max_downtime is an error saying what would shorten
// it.
func (e *Engine) estimateServices(plan *Plan, snap *state.Snapshot) ([]ServicePlan, phases.Diagnostics) {
	if len(e.runbook.Services) == 0 {
		return nil, nil // no index of the plan's steps for nothing: every plan comes here
	}
	planned := map[phases.Address]*StepPlan{}
	for _, pp := range plan.Phases {
		for _, sp := range pp.Steps {
			planned[sp.Addr] = sp
		}
	}
	est := &estimator{e: e, snap: snap, planned: planned}
	var list []ServicePlan
	var diags phases.Diagnostics
	for _, svc := range e.runbook.Services {
		opens := slices.ContainsFunc(svc.Stop, func(a phases.Address) bool {
			sp := planned[a]
			return sp != nil && sp.Action != providers.NoOp
		})
		if !opens {
			continue
		}
		sp := est.service(svc)
		list = append(list, sp)
		if svc.MaxDowntime > 0 && sp.Expected > svc.MaxDowntime {
			r := svc.Range
			diags = append(diags, phases.Diagnostic{
				Severity: phases.Error,
				Summary:  "Expected Downtime Over the Limit",
				Detail:   fmt.Sprintf("Service %q is expected to be down %s, over its max_downtime of %s. The window's longest path:\n%s\n%s", svc.Name, roundDuration(sp.Expected), svc.MaxDowntime, termLines(sp.Terms), shorten(sp)),
				Subject:  &r,
			})
		}
	}
	return list, diags
}

// termLines lists a window's terms, one a line.
func termLines(terms []EstimateTerm) string {
	var b strings.Builder
	for _, t := range terms {
		fmt.Fprintf(&b, "  %s: %s (%s)\n", t.Addr, roundDuration(t.Expected), t.Basis)
	}
	return strings.TrimRight(b.String(), "\n")
}

// shorten says what would shorten a window, by its longest term.
func shorten(sp ServicePlan) string {
	longest := slices.MaxFunc(sp.Terms, func(a, b EstimateTerm) int { return cmp.Compare(a.Expected, b.Expected) })
	if strings.HasPrefix(longest.Basis, "copy") {
		return fmt.Sprintf("The copy %s takes most of it: copy while the service still runs (an incus_sync warm pass before the stop) so that only what changed is copied in the window, or move the data that need not move (media) to the data volume beforehand; or raise max_downtime if the household agrees.", longest.Addr)
	}
	return fmt.Sprintf("%s takes most of it: run what does not need the old service stopped before the stop (in an earlier phase, or not depending on it), or raise max_downtime if the household agrees.", longest.Addr)
}

// estimator works out windows for one plan.
type estimator struct {
	e       *Engine
	snap    *state.Snapshot
	planned map[phases.Address]*StepPlan
	rate    *copyRate                  // once
	byKin   map[string][]time.Duration // once
}

// service is svc's expected window: each phase from its first stop's to
// its serving check's scheduled as soon as its steps' dependencies allow
// (as the walk runs them, parallelism aside); the window runs from the
// first stop's start to the end of that phase, through each later one
// (the serving check's own phase up to the steps it waits for), and then
// the check. Its terms are the steps of each phase's critical
// path that end inside the window (of paths as long, one through the
// service's own steps).
func (est *estimator) service(svc *phases.Service) ServicePlan {
	sp := ServicePlan{Name: svc.Name, Max: svc.MaxDowntime}
	stops := map[phases.Address]bool{}
	for _, a := range svc.Stop {
		stops[a] = true
	}
	serving := est.e.steps[svc.Serving]
	first, last := -1, -1
	for i, ph := range est.e.phaseOrder {
		for _, s := range ph.Steps {
			if stops[s.Addr] && first < 0 {
				first = i
			}
		}
		if serving != nil && ph.Name == serving.Phase {
			last = i
		}
	}
	if first < 0 || last < first {
		return sp
	}
	own := descendants(est.e.phaseOrder[first:last+1], stops)
	for i := first; i <= last; i++ {
		steps := est.e.phaseOrder[i].Steps
		if i == last {
			waited := waitedFor(est.e.phaseOrder[i], serving)
			if i != first || slices.ContainsFunc(waited, func(s *phases.Step) bool { return stops[s.Addr] }) {
				steps = waited
			}
		}
		sc := est.schedule(steps, own)
		from := time.Duration(0)
		if i == first {
			from = -1
			for a := range stops {
				if t, ok := sc.start[a]; ok && (from < 0 || t < from) {
					from = t
				}
			}
		}
		sp.Expected += max(0, sc.end-from)
		for _, t := range sc.path {
			if sc.start[t.Addr]+t.Expected > from {
				sp.Terms = append(sp.Terms, t)
			}
		}
	}
	if serving != nil {
		t := est.term(serving)
		sp.Terms = append(sp.Terms, t)
		sp.Expected += t.Expected
	}
	return sp
}

// waitedFor are the steps of ph the serving check runs after: all of
// them, or, for a check that depends on some (Phase.WaitsFor), those and
// what they depend on in the phase. (Its window is scheduled over them
// when they hold its stop, or the stop is in an earlier phase.)
func waitedFor(ph *phases.Phase, serving *phases.Step) []*phases.Step {
	deps := ph.WaitsFor(serving)
	if len(deps) == 0 {
		return ph.Steps
	}
	in := map[phases.Address]*phases.Step{}
	for _, s := range ph.Steps {
		in[s.Addr] = s
	}
	need := map[phases.Address]bool{}
	for queue := deps; len(queue) > 0; queue = queue[1:] {
		if a := queue[0]; !need[a] && in[a] != nil {
			need[a] = true
			queue = append(queue, in[a].DependsOn...)
		}
	}
	return slices.DeleteFunc(slices.Clone(ph.Steps), func(s *phases.Step) bool { return !need[s.Addr] })
}

// phaseSchedule is a phase's steps scheduled as soon as they may start.
type phaseSchedule struct {
	start map[phases.Address]time.Duration
	end   time.Duration  // when its last step ends
	path  []EstimateTerm // the critical path to that end, in run order
}

// schedule starts each step once its dependencies in the phase ended,
// each taking its expected time.
func (est *estimator) schedule(steps []*phases.Step, own map[phases.Address]bool) phaseSchedule {
	in := map[phases.Address]*phases.Step{}
	for _, s := range steps {
		in[s.Addr] = s
	}
	type slot struct {
		start, end time.Duration
		own        bool // the path to its end goes through the service's own steps
		prev       phases.Address
		term       EstimateTerm
	}
	later := func(a, b *slot) bool { return b == nil || a.end > b.end || a.end == b.end && a.own && !b.own }
	memo := map[phases.Address]*slot{}
	var place func(s *phases.Step) *slot
	place = func(s *phases.Step) *slot {
		if sl, ok := memo[s.Addr]; ok {
			return sl
		}
		sl := &slot{term: est.term(s)}
		memo[s.Addr] = sl // the graph is acyclic: the loader says so
		var last *slot
		for _, d := range s.DependsOn {
			if ds := in[d]; ds != nil {
				if dl := place(ds); later(dl, last) {
					last, sl.prev = dl, d
				}
			}
		}
		if last != nil {
			sl.start, sl.own = last.end, last.own
		}
		sl.end, sl.own = sl.start+sl.term.Expected, sl.own || own[s.Addr]
		return sl
	}
	sc := phaseSchedule{start: map[phases.Address]time.Duration{}}
	var final *slot
	for _, s := range steps {
		sl := place(s)
		sc.start[s.Addr] = sl.start
		if later(sl, final) {
			final = sl
		}
	}
	for sl := final; sl != nil; {
		sc.path = append(sc.path, sl.term)
		if sl.prev.IsZero() {
			break
		}
		sl = memo[sl.prev]
	}
	slices.Reverse(sc.path)
	if final != nil {
		sc.end = final.end
	}
	return sc
}

// descendants are the stops and the steps of phs that depend on them,
// directly or not.
func descendants(phs []*phases.Phase, stops map[phases.Address]bool) map[phases.Address]bool {
	dependents := map[phases.Address][]phases.Address{}
	for _, ph := range phs {
		for _, s := range ph.Steps {
			for _, d := range s.DependsOn {
				dependents[d] = append(dependents[d], s.Addr)
			}
		}
	}
	own := maps.Clone(stops)
	queue := slices.Collect(maps.Keys(stops))
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for _, d := range dependents[a] {
			if !own[d] {
				own[d] = true
				queue = append(queue, d)
			}
		}
	}
	return own
}

// term is how long s is expected to take: nothing when the plan leaves it
// as it is; a copy's bytes at the copy rate measured here; its own last
// run; the median of its provider's steps (or checks) run here; else an
// assumption.
func (est *estimator) term(s *phases.Step) EstimateTerm {
	t := EstimateTerm{Addr: s.Addr}
	if sp := est.planned[s.Addr]; sp != nil && sp.Action == providers.NoOp && !s.IsCheck() {
		t.Basis = "done: nothing to do"
		return t
	}
	if sp := est.planned[s.Addr]; sp != nil && sp.CopyBytes > 0 {
		// Its bytes at the rate measured here, on top of what such a
		// step takes anyway (listing, hashing, starting commands).
		n := float64(sp.CopyBytes)
		r := est.copyRate()
		base := est.measured(s)
		t.Expected = base.Expected + time.Duration(n/r.bytesPerSecond*float64(time.Second))
		t.Basis = fmt.Sprintf("copy: %s at %s/s, %s; and %s as %s", bytesText(n), bytesText(r.bytesPerSecond), r.basis, roundDuration(base.Expected), strings.TrimPrefix(base.Basis, "measured: "))
		return t
	}
	return est.measured(s)
}

// measured is how long s is expected to take by the steps run here: its
// own last run, else the median of its closest kin, else an assumption.
func (est *estimator) measured(s *phases.Step) EstimateTerm {
	t := EstimateTerm{Addr: s.Addr}
	if rec := est.snap.Steps[s.Addr.String()]; rec != nil && rec.Status == state.Done && took(rec) > 0 {
		t.Expected, t.Basis = took(rec), "measured: its last run"
		return t
	}
	kind := "step"
	if s.IsCheck() {
		kind = "check"
	}
	provider, _, _ := strings.Cut(s.Provider, ".")
	// The closest kin measured here: steps of its type, else of its
	// provider; for a check, else any check (checks wait for what they
	// check).
	for _, kin := range []struct{ what, key string }{
		{kind + "s of type " + s.Addr.Type, kind + " type " + s.Addr.Type},
		{kind + "s of the " + provider + " provider", kind + " provider " + provider},
		{"checks", kind + " any"},
	} {
		if ds := est.kin()[kin.key]; len(ds) > 0 && (kin.what != "checks" || s.IsCheck()) {
			t.Expected, t.Basis = ds[len(ds)/2], fmt.Sprintf("measured: the median of %d %s run here", len(ds), kin.what)
			return t
		}
	}
	t.Expected, t.Basis = assumedStep, fmt.Sprintf("assumed: no %s of its type or provider has run here yet", kind)
	return t
}

// kin are the durations of the done steps (and checks) run here, sorted,
// by what they are: "step type T", "step provider P", "check any"...;
// worked out once per plan.
func (est *estimator) kin() map[string][]time.Duration {
	if est.byKin != nil {
		return est.byKin
	}
	est.byKin = map[string][]time.Duration{}
	for _, s := range est.e.steps {
		rec := est.snap.Steps[s.Addr.String()]
		if rec == nil || rec.Status != state.Done || took(rec) <= 0 {
			continue
		}
		kind := "step"
		if s.IsCheck() {
			kind = "check"
		}
		provider, _, _ := strings.Cut(s.Provider, ".")
		for _, key := range []string{kind + " type " + s.Addr.Type, kind + " provider " + provider, kind + " any"} {
			est.byKin[key] = append(est.byKin[key], took(rec))
		}
	}
	for _, ds := range est.byKin {
		slices.Sort(ds)
	}
	return est.byKin
}

// took is how long a done record's last apply took.
func took(rec *state.StepRecord) time.Duration {
	if rec.StartedAt == nil || rec.FinishedAt == nil {
		return 0
	}
	return rec.FinishedAt.Sub(*rec.StartedAt)
}

// numberAttr is v's attribute name as a float, when it is a known number.
func numberAttr(v cty.Value, name string) (float64, bool) {
	v, _ = v.Unmark()
	if v == cty.NilVal || !v.IsKnown() || v.IsNull() || !v.Type().IsObjectType() || !v.Type().HasAttribute(name) {
		return 0, false
	}
	n := v.GetAttr(name)
	n, _ = n.Unmark()
	if !n.IsKnown() || n.IsNull() || n.Type() != cty.Number {
		return 0, false
	}
	f, _ := n.AsBigFloat().Float64()
	return f, true
}

// copyRate is the rate a copy is expected at, and why.
type copyRate struct {
	bytesPerSecond float64
	basis          string
}

// copyRate is the rate of the copies done on this host (their bytes over
// their seconds, as their outputs say), else an assumed one.
func (est *estimator) copyRate() copyRate {
	if est.rate != nil {
		return *est.rate
	}
	var bytes, seconds float64
	n := 0
	for _, rec := range est.snap.Steps {
		if rec.Status != state.Done {
			continue
		}
		b, s, ok := copied(rec)
		if ok && b >= minMeasuredCopy && s > 0 {
			bytes, seconds, n = bytes+b, seconds+s, n+1
		}
	}
	r := copyRate{bytesPerSecond: assumedRate, basis: "assumed: no copy of 1 MiB or more has run here yet"}
	if n > 0 {
		r = copyRate{bytesPerSecond: bytes / seconds, basis: fmt.Sprintf("measured: %s run here", countText(n, "copy", "copies"))}
	}
	est.rate = &r
	return r
}

// copied is what a record says it copied, in how long: its outputs
// (incus_sync's), else its facts (what a rehearsal's Job measured).
func copied(rec *state.StepRecord) (bytes, seconds float64, ok bool) {
	if v, _, err := decodeOutputs(rec.Outputs); len(rec.Outputs) > 0 && err == nil {
		b, okB := numberAttr(v, CopiedBytes)
		s, okS := numberAttr(v, CopySeconds)
		if okB && okS {
			return b, s, true
		}
	}
	b, errB := strconv.ParseFloat(rec.Facts[CopiedBytes], 64)
	s, errS := strconv.ParseFloat(rec.Facts[CopySeconds], 64)
	return b, s, errB == nil && errS == nil
}

// bytesText writes a size as people read it: 312.4 MB.
func bytesText(n float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// roundDuration keeps a duration readable: seconds below an hour.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// countText is n with its noun: "1 copy", "3 copies".
func countText(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
