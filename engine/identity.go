package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// A record is proof about the thing it was made on, not about whatever
// has its name now (docs/design.md, "Records"). A provider names the
// thing a step made or acted on (Identity: an instance's UUID, a
// cluster's UID), and each record keeps the world of the steps it
// depends on when it ran (Upstream). When one of them was replaced since
// — a VM deleted and made again, a cluster bootstrapped anew — the record
// describes the world before, and the step is planned and run as if it
// had never run.

// worldOf is what a record's dependents keep of it: its own identity and
// the worlds of its dependencies, in one digest, so that a replacement
// anywhere upstream changes the world of every step below it. Empty when
// the record names no identity, itself or upstream: nothing to compare.
func worldOf(rec *state.StepRecord) string {
	if rec == nil || rec.Identity == "" && len(rec.Upstream) == 0 {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q\n", rec.Identity)
	keys := make([]string, 0, len(rec.Upstream))
	for k := range rec.Upstream {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, rec.Upstream[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// lookup finds the current record of a step.
type lookup func(phases.Address) *state.StepRecord

func (e *Engine) stateLookup(a phases.Address) *state.StepRecord {
	rec, ok := e.state.Step(a)
	if !ok {
		return nil
	}
	return rec
}

func snapshotLookup(snap *state.Snapshot) lookup {
	return func(a phases.Address) *state.StepRecord { return snap.Steps[a.String()] }
}

// upstreamWorlds is what a step that completes now keeps as its Upstream:
// the world of each step it depends on that is done and names one.
func upstreamWorlds(s *phases.Step, find lookup) map[string]string {
	var up map[string]string
	for _, d := range s.DependsOn {
		rec := find(d)
		if rec == nil || rec.Status != state.Done {
			continue
		}
		if w := worldOf(rec); w != "" {
			if up == nil {
				up = map[string]string{}
			}
			up[d.String()] = w
		}
	}
	return up
}

// replacedSince names the step s depends on whose world changed since rec
// was made, or says "" when none did. A dependency the record kept no
// world of (a state written before records had one, or a step that named
// no identity then) is not compared: there is nothing to compare with.
func replacedSince(s *phases.Step, rec *state.StepRecord, find lookup) string {
	if rec == nil || rec.Status != state.Done || len(rec.Upstream) == 0 {
		return ""
	}
	for _, d := range s.DependsOn {
		was, kept := rec.Upstream[d.String()]
		if !kept {
			continue
		}
		dep := find(d)
		if dep == nil || dep.Status != state.Done {
			continue // it runs again first; the run compares then
		}
		if now := worldOf(dep); now != "" && now != was {
			what := d.String() + " was made again since this step ran"
			if dep.Identity != "" {
				what += " (it is " + dep.Identity + " now)"
			} else {
				what += ", on something else"
			}
			return what + ": the record describes the world before"
		}
	}
	return ""
}

// targetReplaced says why a step's own target is not the one its record
// describes: its provider reads another identity than the recorded one.
func targetReplaced(rec *state.StepRecord, now string) string {
	if rec == nil || rec.Identity == "" || now == "" || now == rec.Identity {
		return ""
	}
	return fmt.Sprintf("what it acts on was replaced since it ran (%s then, %s now): the record describes the one before", rec.Identity, now)
}

// replanned is why a step the plan took as done runs after all, and how.
type replanned struct {
	// reason is said in the StepPlanned event.
	reason string
	// action is what its provider plans: Create when the record is about
	// a world since replaced (it is applied as if it had never run),
	// Drift when, read again, its effect is not there.
	action providers.Action
}

// stillDone decides, just before a step the plan took as done is passed
// over, whether it still is: no step it depends on was made again since
// its record, and, when the plan said to read it again after the steps
// before it changed, its provider still finds it. It returns nil when it
// is done, else why and how it must run.
func (r *stepRunner) stillDone(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, sp *StepPlan) *replanned {
	if why := replacedSince(s, rec, r.e.stateLookup); why != "" {
		return r.forget(rec, why)
	}
	if sp == nil || len(sp.Recheck) == 0 {
		return nil
	}
	read := p.Read(r.cancel, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec)})
	if why := targetReplaced(rec, read.Identity); why != "" {
		return r.forget(rec, why)
	}
	switch {
	case read.Diagnostics.HasErrors():
		return &replanned{action: providers.Drift, reason: "read again after " + joinAddrs(sp.Recheck) + " ran, it could not be observed: " + r.e.redactDiags(read.Diagnostics).Err().Error()}
	case read.Observation == providers.Present:
		return nil
	}
	why := read.Detail
	if why == "" {
		why = "its effect is not there"
	}
	return &replanned{action: providers.Drift, reason: "read again after " + joinAddrs(sp.Recheck) + " ran: " + why}
}

// forget drops what rec says about a world since replaced (its outputs,
// private data, revert data and identity described the thing before): the
// step is applied as if it had never run.
func (r *stepRunner) forget(rec *state.StepRecord, why string) *replanned {
	rec.Outputs, rec.Private, rec.Revert, rec.Identity, rec.Upstream = nil, nil, nil, "", nil
	// Not done any more: its provider gets no prior (priorOf), as for a
	// step that never ran. A prior with nothing in it would still say
	// "this ran" (the talos provider refuses a node it installed that
	// answers in maintenance mode, and the node here is a new one).
	rec.Status, rec.Attempts = state.Pending, 0
	return &replanned{action: providers.Create, reason: why}
}

// planAgain plans a step that runs after all (see stillDone) just before
// it is applied: the diff and why go out as a StepPlanned event, and its
// provider's private plan is what Apply gets.
func (r *stepRunner) planAgain(s *phases.Step, p providers.Interface, cfg cty.Value, rec *state.StepRecord, again *replanned) (json.RawMessage, bool) {
	resp := p.Plan(r.cancel, providers.PlanRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg, Prior: priorOf(rec), Action: again.action})
	if resp.Diagnostics.HasErrors() {
		return nil, r.fail(s, rec, withSubject(resp.Diagnostics, s.Range).Err())
	}
	ev := Event{Kind: StepPlanned, Phase: s.Phase, Addr: s.Addr, Check: s.IsCheck(), Message: r.e.hooks.redactor.Text(resp.Diff), Reason: r.e.hooks.redactor.Text(again.reason)}
	if !r.emit(ev) {
		return nil, false
	}
	return resp.Private, true
}

// rebase reads again, before s is recorded as done, each step s depends
// on whose type says Rebase (phases.StepType.Rebase): s may have changed
// its effect on purpose (a restore Job unpacks and chowns what a copy
// put there), and what its provider finds now becomes that step's
// record, so that the next plan calls drift only a change from outside
// the runbook. It runs before s's own checkpoint: a kill in between
// leaves s running, and its resumed run rebases again.
func (r *stepRunner) rebase(s *phases.Step) bool {
	if s.IsCheck() {
		return true // a check only reads
	}
	for _, d := range s.DependsOn {
		ds := r.e.steps[d]
		if ds == nil || ds.IsCheck() || !r.e.rebases(ds) {
			continue
		}
		rec, ok := r.e.state.Step(d)
		if !ok || rec.Status != state.Done {
			continue
		}
		p, _, pd := r.e.use(r.cancel, ds, r.out)
		cfg, diags := r.out.evaluate(ds)
		if p == nil || pd.HasErrors() || diags.HasErrors() {
			continue
		}
		read := p.Read(r.cancel, providers.ReadRequest{Type: d.Type, Addr: d, Config: cfg, Prior: priorOf(rec), Rebase: true})
		if read.Diagnostics.HasErrors() {
			// Not observed: the record stays as it was, and the next
			// plan may call drift what s did (it says what differs).
			r.emit(Event{Kind: StepOutput, Phase: s.Phase, Addr: s.Addr, Message: fmt.Sprintf("could not read %s again after this step ran: %s", d, r.e.redactDiags(read.Diagnostics).Err())})
			continue
		}
		if read.Private == nil {
			continue // nothing new to keep
		}
		rec.Private = read.Private
		if err := r.e.state.Checkpoint(rec); err != nil {
			r.mu.Lock()
			if r.err == nil {
				r.err = fmt.Errorf("recording %s: %w", d, err)
			}
			r.mu.Unlock()
			return false
		}
	}
	return true
}

// rebases reports whether a step's type says Rebase; schemas are asked
// once per provider and type.
func (e *Engine) rebases(s *phases.Step) bool {
	key := s.Provider + " " + s.Addr.Type
	e.rebaseMu.Lock()
	defer e.rebaseMu.Unlock()
	if v, ok := e.rebaseTypes[key]; ok {
		return v
	}
	v := false
	if p := e.provider(s); p != nil {
		v = p.Schema().StepTypes[s.Addr.Type].Rebase
	}
	if e.rebaseTypes == nil {
		e.rebaseTypes = map[string]bool{}
	}
	e.rebaseTypes[key] = v
	return v
}

// goingWith names the step that discards a's effects (Step.Discards)
// and was being applied when a run stopped: a VM's deletion killed
// half-way, say. a's host is gone or going, and what its provider is
// configured from (the VM's address) may be gone with it: a is not
// asked about, in the plan or the run, while the deletion is resumed.
func (e *Engine) goingWith(a phases.Address, rec *state.StepRecord, find lookup) (phases.Address, bool) {
	if rec == nil || rec.Status != state.Done {
		return phases.Address{}, false
	}
	for _, by := range e.discardedBy[a] {
		if d := find(by); d != nil && d.Status == state.Running {
			return by, true
		}
	}
	return phases.Address{}, false
}

// consumedInFlight names a step that depends on s, whose type says
// Rebase, and that a stopped run was applying: it may have changed s's
// effect on purpose (a restore Job that ran and was not recorded), and
// s is read again, and handed over, once it is recorded. Until then s is
// not read: what it would find is not drift.
func (e *Engine) consumedInFlight(s *phases.Step, rec *state.StepRecord, find lookup) (phases.Address, bool) {
	if rec == nil || rec.Status != state.Done || !e.rebases(s) {
		return phases.Address{}, false
	}
	for _, other := range e.steps {
		if !slices.Contains(other.DependsOn, s.Addr) || other.IsCheck() {
			continue
		}
		if d := find(other.Addr); d != nil && d.Status == state.Running {
			return other.Addr, true
		}
	}
	return phases.Address{}, false
}
