package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

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
	f.Upstream = replacedSince(s, rec, find, e.origins)
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
//
// A world names the steps it holds the worlds of, so a record kept before
// the runbook's moved blocks renamed some of them (origins: new address
// -> the first one) is also compared under the names it had then: a
// rename replaces nothing.
func replacedSince(s *phases.Step, rec *state.StepRecord, find lookup, origins map[string]string) *Why {
	for _, d := range s.DependsOn {
		was, kept := rec.Upstream[d.String()]
		if !kept {
			continue
		}
		dep := find(d)
		if dep == nil || dep.Status != state.Done {
			continue // it runs again first; the run compares then
		}
		if now := worldOf(dep); now != "" && now != was && worldNamed(dep, origins) != was {
			return &Why{By: []phases.Address{d}, Now: dep.Identity}
		}
	}
	return nil
}

// movedOrigins maps each address the runbook's moved blocks move a
// record to onto the address it had first (a -> b, b -> c: c and b to
// a); nil without moved blocks. Made once, by New (Engine.origins).
func movedOrigins(moved []*phases.Moved) map[string]string {
	if len(moved) == 0 {
		return nil
	}
	origins := map[string]string{}
	for _, m := range moved {
		first, ok := origins[m.From.String()]
		if !ok {
			first = m.From.String()
		}
		origins[m.To.String()] = first
	}
	return origins
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
	for _, k := range sortedKeys(rec.Upstream) {
		fmt.Fprintf(h, "%q=%q\n", k, rec.Upstream[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// worldNamed is worldOf(rec) with the addresses of its Upstream named as
// names says (those it does not name as they are): the world it had
// before its dependencies were renamed. "" when no name changes.
func worldNamed(rec *state.StepRecord, names map[string]string) string {
	renamed := false
	up := make(map[string]string, len(rec.Upstream))
	for k, w := range rec.Upstream {
		if old, ok := names[k]; ok {
			k, renamed = old, true
		}
		up[k] = w
	}
	if !renamed {
		return ""
	}
	c := *rec
	c.Upstream = up
	return worldOf(&c)
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

// rebases reports whether a step's type says Rebase; schemas are asked
// once per provider and type.
func (e *Engine) rebases(s *phases.Step) bool {
	key := s.Provider + " " + s.Addr.Type
	if v, ok := e.rebaseTypes.Load(key); ok {
		return v.(bool)
	}
	v := false
	if p := e.provider(s); p != nil {
		v = p.Schema().StepTypes[s.Addr.Type].Rebase
	}
	e.rebaseTypes.Store(key, v)
	return v
}

// stepInputs is the second stage's yield: s's inputs evaluated, what
// they wait for, its provider (configured), their hash, and whether a
// step s depends on changes in this plan (its provider's Plan is told).
type stepInputs struct {
	cfg          cty.Value
	after        []phases.Address
	p            providers.Interface
	in           inputs
	diags        phases.Diagnostics
	afterChanges bool
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
		if !f.Matches {
			f.Matches = e.matchesNamedBefore(ctx, s, g.cfg, f.Rec.InputHash)
		}
	}
	f.ChangesBefore = out.changesBefore(s.DependsOn)
	g.afterChanges = out.afterChanges(s.DependsOn)
	return g
}

// matchesNamedBefore reports whether the record a moved block carried to
// s was made with these inputs but for the name: the step it was made by
// had no name attribute, and its object took the step's name, which s
// (in a group, or renamed) now writes out. With name null, the same
// hash.
func (e *Engine) matchesNamedBefore(ctx context.Context, s *phases.Step, cfg cty.Value, recorded string) bool {
	if cfg.IsMarked() || !cfg.IsKnown() || cfg.IsNull() || !cfg.Type().IsObjectType() || !cfg.Type().HasAttribute("name") {
		return false
	}
	name := cfg.GetAttr("name")
	if name.IsMarked() || !name.IsKnown() || name.IsNull() || !name.Type().Equals(cty.String) {
		return false
	}
	for _, m := range e.runbook.Moved {
		if m.From.Name != name.AsString() || !e.movesTo(m.From, s.Addr) {
			continue
		}
		attrs := cfg.AsValueMap()
		attrs["name"] = cty.NullVal(cty.String)
		return e.hashInputs(ctx, s, cty.ObjectVal(attrs)).matches(recorded)
	}
	return false
}

// movesTo reports whether the runbook's moved blocks carry a record at
// from to to, in one block or a chain of them.
func (e *Engine) movesTo(from, to phases.Address) bool {
	at := from
	for _, m := range e.runbook.Moved {
		if m.From == at {
			at = m.To
		}
	}
	return at == to && from != to
}

// waitsFor is the list of steps a step's inputs wait for, when some of
// them are not known yet.
func waitsFor(cfg cty.Value, after []phases.Address) []phases.Address {
	if cfg.IsWhollyKnown() {
		return nil
	}
	return after
}

// lazyProvider is a provider whose block uses step outputs
// (endpoints = [incus_instance.talos.ipv4]). It is configured at its first
// use, with the outputs known then, and never again in the run: what its
// steps did was done against that configuration.
type lazyProvider struct {
	mu         sync.Mutex
	pc         *phases.ProviderConfig
	configured bool
	failed     phases.Diagnostics // the errors of that one Configure
}

// use returns the provider of s, configured. A provider whose block uses
// step outputs is configured here the first time, with the outputs out
// holds; while some of them are not known yet, it returns no provider and
// the steps they wait for.
func (e *Engine) use(ctx context.Context, s *phases.Step, out *outputs) (providers.Interface, []phases.Address, phases.Diagnostics) {
	p, lp := e.providers[s.Provider], e.lazy[s.Provider]
	if lp == nil {
		return p, nil, nil
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.configured {
		if lp.failed != nil {
			return nil, nil, lp.failed
		}
		return p, nil, nil
	}
	out.mu.RLock()
	cfg, diags := lp.pc.Config.Evaluate(out.m)
	out.mu.RUnlock()
	diags = withSubject(diags, lp.pc.Range)
	if diags.HasErrors() {
		return nil, nil, diags
	}
	cfg, after := stripKnownAfter(cfg)
	if !cfg.IsWhollyKnown() {
		if len(after) == 0 {
			after = lp.pc.DependsOn
		}
		return nil, after, diags
	}
	resp := p.Configure(ctx, providers.ConfigureRequest{Name: lp.pc.Name, Config: cfg, Dir: e.runbook.Dir, StateDir: e.stateDir})
	lp.configured = true
	diags = append(diags, withSubject(resp.Diagnostics, lp.pc.Range)...)
	if diags.HasErrors() {
		lp.failed = diags
		return nil, nil, diags
	}
	return p, nil, diags
}

// hashInputs hashes a step's inputs: its attributes, plus what its
// provider adds through InputDigester (files the attributes name).
func (e *Engine) hashInputs(ctx context.Context, s *phases.Step, cfg cty.Value) inputs {
	attrs, ok := attrBytes(cfg, false)
	if !ok {
		return inputs{}
	}
	set, _ := attrBytes(cfg, true)
	var digest string
	if d, ok := e.provider(s).(providers.InputDigester); ok {
		resp := d.InputDigest(ctx, providers.DigestRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg})
		if resp.Diagnostics.HasErrors() || resp.Unknown {
			// Not knowable now: the plan says update, and the
			// provider's own Plan reports any problem.
			return inputs{}
		}
		digest = resp.Digest
	}
	in := inputs{plain: plainHash(attrs, digest), bare: plainHash(attrs, "")}
	in.hash = plainPrefix + plainHash(set, digest)
	in.attrs = plainPrefix + plainHash(set, "")
	if len(e.inputKey) > 0 {
		in.keyedV1 = keyedPrefixV1 + e.keyID() + ":" + e.mac(attrs, digest)
		in.hash = keyedPrefix + e.keyID() + ":" + e.mac(set, digest)
		in.attrs = keyedPrefix + e.keyID() + ":" + e.mac(set, "")
	}
	return in
}

// otherKey says why a record's keyed hash cannot be compared: it was made
// under another input key (Was, this run's Now), or under one when this
// run has none (Now empty). Nil when it can be.
func (e *Engine) otherKey(recorded string) *Why {
	rest, ok := strings.CutPrefix(recorded, keyedPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(recorded, keyedPrefixV1); !ok {
			return nil
		}
	}
	id, _, _ := strings.Cut(rest, ":")
	switch {
	case len(e.inputKey) == 0:
		return &Why{Was: id}
	case id != e.keyID():
		return &Why{Was: id, Now: e.keyID()}
	}
	return nil
}

// read is the third stage: what s's provider observes now.
func (g stepInputs) read(ctx context.Context, s *phases.Step, rec *state.StepRecord, f *stepFacts) providers.ReadResponse {
	read := g.p.Read(ctx, providers.ReadRequest{Type: s.Addr.Type, Addr: s.Addr, Config: g.cfg, Prior: priorOf(rec)})
	f.Read = &read
	return read
}

// withSubject gives diagnostics that have no subject r.
func withSubject(d phases.Diagnostics, r phases.Range) phases.Diagnostics {
	for i := range d {
		if d[i].Subject == nil {
			rr := r
			d[i].Subject = &rr
		}
	}
	return d
}

// outputs is the table of step outputs that evaluation sees; it is read
// by parallel evaluations while finished steps add to it.
type outputs struct {
	mu       sync.RWMutex
	m        map[phases.Address]cty.Value
	corrupt  map[phases.Address]error // recorded outputs that do not decode
	changing map[phases.Address]bool  // steps this plan changes
	recheck  map[phases.Address]bool  // steps read again after those they depend on
	// upstream keeps, in a plan, whether some step a step depends on (at
	// any depth) changes or is read again (upstreamChanges); nil at run,
	// where what changes moves as steps run.
	upstream map[phases.Address]bool
}

// evaluateAfter evaluates s's inputs, and says which steps the unknown
// values in the result wait for.
func (o *outputs) evaluateAfter(s *phases.Step) (cty.Value, []phases.Address, phases.Diagnostics) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if d := o.corruptInputs(s); d != nil {
		return cty.DynamicVal, nil, withSubject(d, s.Range)
	}
	v, d := s.Config.Evaluate(o.m)
	v, after := stripKnownAfter(v)
	return v, after, withSubject(d, s.Range)
}

// corruptInputs reports the steps s depends on whose recorded outputs do
// not decode (a damaged or edited state): without it, s would only be told
// that they have not run.
func (o *outputs) corruptInputs(s *phases.Step) phases.Diagnostics {
	var diags phases.Diagnostics
	for _, d := range s.DependsOn {
		if err := o.corrupt[d]; err != nil {
			diags = append(diags, phases.Errorf("Corrupt Recorded Outputs",
				"%s depends on %s, which is done, but the outputs recorded for it in the state are corrupt (%v): "+
					"the state was damaged or edited. To recover, restore the previous snapshot (state.json.backup in "+
					"the state directory) if its record of %s is intact, or roll %s back and run it again.",
				s.Addr, d, err, d, d)...)
		}
	}
	return diags
}

func (o *outputs) set(a phases.Address, v cty.Value) {
	o.mu.Lock()
	o.m[a] = v
	o.mu.Unlock()
}

// pending makes a's outputs unknown until a has run, and a a step that
// changes.
func (o *outputs) pending(a phases.Address) {
	o.mu.Lock()
	o.m[a] = unknownUntil(a)
	o.changing[a] = true
	o.mu.Unlock()
}

// planned gives the steps after a the outputs its plan already knows
// (providers.PlanResponse.Outputs); what it does not know stays unknown
// until a has run. a still changes.
func (o *outputs) planned(a phases.Address, v cty.Value) {
	if v == cty.NilVal || v.IsNull() {
		return
	}
	marked, err := cty.Transform(v, func(_ cty.Path, x cty.Value) (cty.Value, error) {
		if !x.IsKnown() {
			return x.Mark(knownAfter(a)), nil
		}
		return x, nil
	})
	if err != nil {
		return
	}
	o.mu.Lock()
	o.m[a] = marked
	o.mu.Unlock()
}

// changesBefore lists the steps of deps that change in this plan, or
// that are read again after steps that do.
func (o *outputs) changesBefore(deps []phases.Address) []phases.Address {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out []phases.Address
	for _, d := range deps {
		if o.changing[d] || o.recheck[d] {
			out = append(out, d)
		}
	}
	return out
}

func (o *outputs) markRecheck(a phases.Address) {
	o.mu.Lock()
	o.recheck[a] = true
	o.mu.Unlock()
}

// afterChanges reports whether a step of deps changes in this plan.
func (o *outputs) afterChanges(deps []phases.Address) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for _, d := range deps {
		if o.changing[d] {
			return true
		}
	}
	return false
}

// loadOutputs seeds the table with every recorded output; steps that have
// not run are unknown.
func (e *Engine) loadOutputs(snap *state.Snapshot) *outputs {
	o := &outputs{m: make(map[phases.Address]cty.Value, len(e.steps)), corrupt: map[phases.Address]error{}, changing: map[phases.Address]bool{}, recheck: map[phases.Address]bool{}}
	for addr := range e.steps {
		o.m[addr] = unknownUntil(addr)
		rec := snap.Steps[addr.String()]
		if rec == nil || rec.Status != state.Done {
			continue
		}
		if v, _, err := decodeOutputs(rec.Outputs); err == nil {
			o.m[addr] = v
		} else {
			o.corrupt[addr] = err
		}
	}
	return o
}

// knownAfter is the cty mark an unknown output carries: the step that
// will produce it. HCL keeps marks through references, templates and
// functions, so the evaluated inputs of a step say which steps each of
// their unknown values waits for. The mark never leaves the engine.
type knownAfter phases.Address

// unknownUntil is the value of a's outputs before a has run.
func unknownUntil(a phases.Address) cty.Value {
	return cty.DynamicVal.Mark(knownAfter(a))
}

// stripKnownAfter removes the knownAfter marks from v, keeping every other
// mark (sensitive values stay marked), and returns the steps they named,
// sorted.
func stripKnownAfter(v cty.Value) (cty.Value, []phases.Address) {
	if v == cty.NilVal || !v.ContainsMarked() {
		return v, nil
	}
	plain, pvms := v.UnmarkDeepWithPaths()
	var after []phases.Address
	kept := pvms[:0:0]
	for _, pvm := range pvms {
		marks := cty.ValueMarks{}
		for m := range pvm.Marks {
			if a, ok := m.(knownAfter); ok {
				if !slices.Contains(after, phases.Address(a)) {
					after = append(after, phases.Address(a))
				}
				continue
			}
			marks[m] = struct{}{}
		}
		if len(marks) > 0 {
			kept = append(kept, cty.PathValueMarks{Path: pvm.Path, Marks: marks})
		}
	}
	slices.SortFunc(after, func(a, b phases.Address) int { return strings.Compare(a.String(), b.String()) })
	return plain.MarkWithPaths(kept), after
}

// A file a step reads may be one a step before it writes (incus_file pulls
// Synapse's signing key, age-encrypted anew each time, and
// kubernetes_secret reads it). When a step it depends on runs in this
// plan, or may, such files are known only after it, like outputs: the plan
// holds the hash of the attributes alone and run hashes the files then.
// Otherwise a file edited by hand after the plan is refused.

// filesAfterPrefix marks a planned input hash of attributes alone.
const filesAfterPrefix = "files-after:"

// plannedHash is the input hash the plan holds for s, which run compares
// before it applies s.
func (e *Engine) plannedHash(s *phases.Step, in inputs, out *outputs) string {
	if in.hash == "" || !e.upstreamChanges(s, out) {
		return in.hash
	}
	return filesAfterPrefix + in.attrs
}

// upstreamChanges reports whether a step s depends on, at any depth,
// changes in this plan or is read again after the steps before it. A
// plan asks it of each step once what s depends on has been planned, and
// keeps the answer for each step it walks through (outputs.upstream:
// "something before it changes"): a chain of n steps costs n, not n
// squared (listing every dependency of every step made a plan of 5,000
// steps in levels of 10 take minutes). The answers hold for the rest of
// the plan: what a step depends on is planned before it (the loader
// keeps a step from depending on a later check or step of its phase; a
// before check, planned after the steps, depends only on earlier
// phases), and a step's marks are set when it is planned. At run it asks
// afresh each time.
func (e *Engine) upstreamChanges(s *phases.Step, o *outputs) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	memo := o.upstream
	if memo == nil {
		memo = map[phases.Address]bool{}
	}
	var before func(a phases.Address) bool
	changes := func(a phases.Address) bool { return o.changing[a] || o.recheck[a] || before(a) }
	before = func(a phases.Address) bool {
		if v, ok := memo[a]; ok {
			return v
		}
		memo[a] = false // the graph has no cycle: this only ends a walk
		if d := e.steps[a]; d != nil {
			memo[a] = slices.ContainsFunc(d.DependsOn, changes)
		}
		return memo[a]
	}
	return slices.ContainsFunc(s.DependsOn, changes)
}

// asPlanned reports whether in are the inputs the plan held (plannedHash);
// a plan that could not know them holds none, and any will do.
func (in inputs) asPlanned(planned string) bool {
	if rest, ok := strings.CutPrefix(planned, filesAfterPrefix); ok {
		return in.attrs != "" && rest == in.attrs
	}
	return planned == "" || planned == in.hash
}

// filesRewritten reports whether a step the plan took as done holds files
// known only after steps before it (plannedHash): if they changed since
// its record, it is planned again just before it is applied.
func filesRewritten(sp *StepPlan) bool {
	return sp != nil && strings.HasPrefix(sp.InputHash, filesAfterPrefix)
}
