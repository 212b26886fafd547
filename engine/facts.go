package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// The facts decide goes by are gathered in stages, each only when decide
// needs it (Decision.Needs): the records (recordFacts), then the step's
// inputs and provider (inputFacts), then what its provider reads.
//
// A record is proof about the thing it was made on, not about whatever
// has its name now (docs/design.md, "Records"). A provider names the
// thing a step made or acted on (Identity: an instance's UUID, a
// cluster's UID), and each record keeps the world of the steps it
// depends on when it ran (Upstream). When one of them was replaced since
// — a VM deleted and made again, a cluster bootstrapped anew — the record
// describes the world before, and the step is planned and run as if it
// had never run.

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

// recordFacts is the first stage: what the records say of s (rec, nil
// when it never ran) and of the steps around it: a step that discards
// it, done (GoneWith) or being applied when a run stopped (GoingWith); a
// dependent whose type says Rebase that a stopped run was applying
// (HandedTo: it may have changed s's effect on purpose, and s is read
// again once it is recorded); a dependency made again since rec
// (Upstream).
func (e *Engine) recordFacts(s *phases.Step, rec *state.StepRecord, find lookup) stepFacts {
	f := stepFacts{Check: s.IsCheck(), Rec: rec}
	if rec == nil || rec.Status != state.Done {
		return f
	}
	f.GoingWith, f.GoneWith = e.discarders(s.Addr, find)
	if e.rebases(s) {
		for _, other := range e.steps {
			if d := find(other.Addr); d != nil && d.Status == state.Running && !other.IsCheck() && slices.Contains(other.DependsOn, s.Addr) {
				f.HandedTo = &other.Addr
				break
			}
		}
	}
	f.Upstream = replacedSince(s, rec, find)
	return f
}

// discarders names a step that discards a's effects (Step.Discards) and
// that a stopped run was applying (going: a VM's deletion killed
// half-way), and one that is done (gone: what a made went with it).
func (e *Engine) discarders(a phases.Address, find lookup) (going, gone *phases.Address) {
	for _, by := range e.discardedBy[a] {
		switch d := find(by); {
		case d == nil:
		case d.Status == state.Running && going == nil:
			going = &by
		case d.Status == state.Done && gone == nil:
			gone = &by
		}
	}
	return going, gone
}

// replacedSince is the dependency of s whose world changed since rec was
// made, nil when none did. A dependency the record kept no world of (a
// state written before records had one, or a step that named no identity
// then) is not compared: there is nothing to compare with.
func replacedSince(s *phases.Step, rec *state.StepRecord, find lookup) *Why {
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
			return &Why{By: []phases.Address{d}, Now: dep.Identity}
		}
	}
	return nil
}

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

// upstreamWorlds is what a step that completes now keeps as its Upstream:
// the world of each step it depends on that is done and names one.
func upstreamWorlds(s *phases.Step, find lookup) map[string]string {
	var up map[string]string
	for _, d := range s.DependsOn {
		if w := worldOf(find(d)); w != "" && find(d).Status == state.Done {
			if up == nil {
				up = map[string]string{}
			}
			up[d.String()] = w
		}
	}
	return up
}

// stepInputs is the second stage's yield: s's inputs evaluated, what
// they wait for, its provider (configured), their hash.
type stepInputs struct {
	cfg   cty.Value
	after []phases.Address
	p     providers.Interface
	in    inputs
	diags phases.Diagnostics
}

// inputFacts is the second stage: it evaluates s's inputs, configures
// its provider if it waited for step outputs, and hashes the inputs.
func (e *Engine) inputFacts(ctx context.Context, s *phases.Step, out *outputs, f *stepFacts) stepInputs {
	var g stepInputs
	f.HaveInputs = true
	g.cfg, g.after, g.diags = out.evaluateAfter(s)
	if g.diags.HasErrors() {
		f.InputsInvalid = true
		return g
	}
	g.after = waitsFor(g.cfg, g.after)
	p, provAfter, pd := e.use(ctx, s, out)
	g.diags = append(g.diags, pd...)
	switch {
	case pd.HasErrors():
		f.ProviderFailed = true
		return g
	case p == nil:
		f.ProviderWaits, f.ProviderName = append([]phases.Address{}, provAfter...), s.Provider
		return g
	}
	g.p, g.in = p, e.hashInputs(ctx, s, g.cfg)
	f.Known, f.Hash = g.cfg.IsWhollyKnown(), g.in.hash
	if f.Rec != nil {
		f.Matches, f.Key = g.in.matches(f.Rec.InputHash), e.otherKey(f.Rec.InputHash)
	}
	f.ChangesBefore = out.changesBefore(s.DependsOn)
	return g
}

// read is the third stage: what s's provider observes now.
func (g stepInputs) read(ctx context.Context, s *phases.Step, rec *state.StepRecord, f *stepFacts) providers.ReadResponse {
	read := g.p.Read(ctx, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: g.cfg, Prior: priorOf(rec)})
	f.Read = &read
	return read
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
