package runbooks

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/graph"
	"github.com/homelab-migrate/migrate/phases"
)

// orderPhases fills Phase.After (from after, or the previous phase),
// reports unknown phases and cycles, and computes which phases run
// strictly before which.
func (ld *load) orderPhases() {
	var prev *phaseDecl
	for _, pd := range ld.phases {
		if a := pd.block.After; a != nil {
			pd.after = ld.decodeAfter(a)
		} else if prev != nil {
			pd.after = []phaseEdge{{name: prev.block.Name, rng: pd.block.DefRange}}
		}
		pd.phase.After = []string{}
		for _, e := range pd.after {
			pd.phase.After = append(pd.phase.After, e.name)
		}
		prev = pd
	}

	g := graph.New(len(ld.phases))
	rngs := edgeRanges{}
	index := map[string]int{}
	for i, pd := range ld.phases {
		index[pd.block.Name] = i
		pd.idx = i
	}
	for i, pd := range ld.phases {
		for _, e := range pd.after {
			rngs.add(g, i, index[e.name], compact(e.rng))
		}
	}
	for _, cyc := range g.Cycles() {
		var members, path []string
		for _, i := range cyc.Members {
			members = append(members, "phase."+ld.phases[i].block.Name)
		}
		for _, i := range cyc.Path {
			path = append(path, "phase."+ld.phases[i].block.Name)
		}
		detail := fmt.Sprintf("The phases %s each wait for another in a cycle: %s (read \"->\" as \"runs after\"). Change an after argument to break it; a phase without after runs after the phase declared before it.",
			englishList(members), strings.Join(path, " -> "))
		if len(cyc.Members) == 1 {
			detail = fmt.Sprintf("The phase %q cannot run after itself. Remove phase.%s from its after argument.",
				ld.phases[cyc.Members[0]].block.Name, ld.phases[cyc.Members[0]].block.Name)
		}
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Phase Order Cycle",
			Detail:   detail,
			Subject:  rngs.first(cyc).Ptr(),
		})
	}

	// Which phases run strictly before which: asked for every dependency
	// between phases, so computed once for all.
	ld.phaseClosure = g.Closure()
}

// runsBefore reports whether phase q runs strictly before phase p.
func (ld *load) runsBefore(q, p *phaseDecl) bool { return ld.phaseClosure.Before(p.idx, q.idx) }

// edgeRanges remembers where each edge of a graph was written (the first
// place, when written twice), for the subject of a cycle.
type edgeRanges map[[2]int]srcRange

func (r edgeRanges) add(g *graph.Graph, from, to int, rng srcRange) {
	if _, ok := r[[2]int{from, to}]; !ok {
		r[[2]int{from, to}] = rng
	}
	g.AddEdge(from, to)
}

// first is the place of a cycle's first edge.
func (r edgeRanges) first(c graph.Cycle) hcl.Range { return r[[2]int{c.Path[0], c.Path[1]}].hcl() }

func (ld *load) decodeAfter(a *hcl.Attribute) []phaseEdge {
	exprs, diags := hcl.ExprList(a.Expr)
	ld.diags = append(ld.diags, diags...)
	var out []phaseEdge
	seen := map[string]bool{}
	for _, e := range exprs {
		tr, diags := hcl.AbsTraversalForExpr(e)
		name := ""
		if !diags.HasErrors() && len(tr) == 2 && tr.RootName() == "phase" {
			name, _ = traverserName(tr[1])
		}
		if name == "" {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid Phase Reference",
				Detail:   "Each entry of after names a phase as phase.NAME, without quotes, as in after = [phase.platform].",
				Subject:  e.Range().Ptr(),
			})
			continue
		}
		if _, ok := ld.phaseIdx[name]; !ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Reference to Undeclared Phase",
				Detail:   fmt.Sprintf("No phase named %q is declared.%s", name, ld.suggest(name, func() []string { return sortedKeys(ld.phaseIdx) })),
				Subject:  e.Range().Ptr(),
			})
			continue
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, phaseEdge{name: name, rng: e.Range()})
		}
	}
	return out
}

// checkStepGraph checks every dependency against the phase order and the
// check timing, and reports cycles among the steps of each phase.
func (ld *load) checkStepGraph() {
	byPhase := map[*phaseDecl][]*stepDecl{}
	for _, d := range ld.allSteps {
		if !d.dup && !d.inst.isTemplate() {
			byPhase[d.phase] = append(byPhase[d.phase], d)
		}
	}
	for _, pd := range ld.phases {
		members := byPhase[pd]
		index := map[phases.Address]int{}
		for i, d := range members {
			index[d.addr()] = i
		}
		g := graph.New(len(members))
		rngs := edgeRanges{}
		for i, d := range members {
			reported := map[phases.Address]bool{}
			for _, r := range d.deps {
				if reported[r.addr] {
					continue
				}
				reported[r.addr] = true
				if j, same := index[r.addr]; same {
					rngs.add(g, i, j, r.rng)
					ld.checkCheckOrder(d, members[j], r.rng.hcl())
					continue
				}
				ld.checkPhaseOrder(d, ld.steps[r.addr], r.rng.hcl())
			}
			if d.prov == nil {
				continue
			}
			// The provider's references are dependencies of the step too.
			for _, r := range d.prov.refs {
				if reported[r.addr] {
					continue
				}
				reported[r.addr] = true
				if j, same := index[r.addr]; same {
					rngs.add(g, i, j, r.rng)
					ld.checkCheckOrder(d, members[j], r.rng.hcl())
					continue
				}
				ld.checkProviderOrder(d, ld.steps[r.addr], r.rng.hcl())
			}
		}
		for _, cyc := range g.Cycles() {
			var names, path []string
			for _, i := range cyc.Members {
				names = append(names, members[i].addr().String())
			}
			for _, i := range cyc.Path {
				path = append(path, members[i].addr().String())
			}
			detail := fmt.Sprintf("The steps %s depend on each other in a cycle: %s. Remove a reference or a depends_on entry to break it.",
				englishList(names), strings.Join(path, " -> "))
			if len(cyc.Members) == 1 {
				detail = fmt.Sprintf("The %s %s depends on itself (%s). A step or check cannot use its own outputs or wait for itself.",
					members[cyc.Members[0]].kind(), names[0], strings.Join(path, " -> "))
			}
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Dependency Cycle",
				Detail:   detail,
				Subject:  rngs.first(cyc).Ptr(),
			})
		}
	}
}

// checkPhaseOrder reports a dependency on a step of a phase that does not
// run strictly before the dependent's phase.
func (ld *load) checkPhaseOrder(d, dep *stepDecl, rng hcl.Range) {
	if dep == nil || ld.runsBefore(dep.phase, d.phase) {
		return
	}
	p, q := d.phase.block.Name, dep.phase.block.Name
	if ld.runsBefore(d.phase, dep.phase) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Dependency Runs Backwards",
			Detail: fmt.Sprintf("The %s %s in phase %q depends on %s, which belongs to phase %q. Phase %q runs first, so %s would not have run yet. Move one of them, or change the phase order with after.",
				d.kind(), d.addr(), p, dep.addr(), q, p, dep.addr()),
			Subject: rng.Ptr(),
		})
		return
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Dependency on Unordered Phase",
		Detail: fmt.Sprintf("The %s %s in phase %q depends on %s, which belongs to phase %q, but nothing makes phase %q run before phase %q. Add phase.%s to the after argument of phase %q.",
			d.kind(), d.addr(), p, dep.addr(), q, q, p, q, p),
		Subject: rng.Ptr(),
	})
}

// checkProviderOrder reports a provider block that uses the outputs of a
// step of a phase that does not run strictly before the phase of a step
// the provider runs: the provider could not be configured for that step.
func (ld *load) checkProviderOrder(d, dep *stepDecl, rng hcl.Range) {
	if dep == nil || ld.runsBefore(dep.phase, d.phase) {
		return
	}
	p, q := d.phase.block.Name, dep.phase.block.Name
	why := fmt.Sprintf("but nothing makes phase %q run before phase %q. Add phase.%s to the after argument of phase %q, or give the step another provider block.", q, p, q, p)
	if ld.runsBefore(d.phase, dep.phase) {
		why = fmt.Sprintf("and phase %q runs first, so %s would not have run yet when the provider is needed. Move one of them, or give the step another provider block.", p, dep.addr())
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Provider Configured from a Later Step",
		Detail: fmt.Sprintf("The provider %s runs the %s %s in phase %q, and its configuration uses %s, which belongs to phase %q, %s",
			d.prov.cfg.Key(), d.kind(), d.addr(), p, dep.addr(), q, why),
		Subject: rng.Ptr(),
	})
}

// checkCheckOrder reports dependencies inside a phase that contradict when
// checks run: a "before" check runs before every step of its phase, an
// "after" check after all of them.
func (ld *load) checkCheckOrder(d, dep *stepDecl, rng hcl.Range) {
	phase := d.phase.block.Name
	switch {
	case d.step.When == phases.CheckBefore && dep.step.When != phases.CheckBefore:
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Check Depends on Later Step",
			Detail: fmt.Sprintf("The check %s runs before any step of phase %q starts, so it cannot depend on %s, which runs later in the same phase.",
				d.addr(), phase, dep.addr()),
			Subject: rng.Ptr(),
		})
	case d.step.When == "" && dep.step.When == phases.CheckAfter:
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Step Depends on Later Check",
			Detail: fmt.Sprintf("The check %s runs after every step of phase %q, so the step %s cannot depend on it.",
				dep.addr(), phase, d.addr()),
			Subject: rng.Ptr(),
		})
	}
}

// build assembles the runbook from everything declared without error.
func (ld *load) build() *phases.Runbook {
	rb := &phases.Runbook{Dir: ld.opts.Dir, Secrets: ld.secrets}
	for _, p := range ld.providerOrder {
		rb.Providers = append(rb.Providers, p.cfg)
	}
	for _, pt := range sortedKeys(ld.implicit) {
		rb.Providers = append(rb.Providers, ld.implicit[pt])
	}
	for _, pd := range ld.phases {
		rb.Phases = append(rb.Phases, pd.phase)
	}
	for _, d := range ld.allSteps {
		if d.dup || d.step.Config == nil {
			continue
		}
		if d.inst.isTemplate() {
			if !d.isCheck {
				d.phase.phase.ForEach = append(d.phase.phase.ForEach, d.step)
			}
			continue
		}
		if d.forEach != nil && !d.isCheck {
			d.phase.phase.ForEach = append(d.phase.phase.ForEach, d.step)
		}
		if g := d.inst; g != nil && g.call.forEach != nil && !d.isCheck && g == g.call.insts[g.call.keys[0]] {
			// What a step of an instance whose key left the call's map
			// is reverted with: the block, addressed without the key.
			t := *d.step
			t.Addr.GroupKey = ""
			d.phase.phase.ForEach = append(d.phase.phase.ForEach, &t)
		}
		for _, s := range d.instances() {
			if d.isCheck {
				d.phase.phase.Checks = append(d.phase.phase.Checks, s)
			} else {
				d.phase.phase.Steps = append(d.phase.phase.Steps, s)
			}
		}
	}
	return rb
}

// resolveDiscards checks each step's discards: steps whose effects the
// step destroys with its own (what was made inside a VM it deletes), so
// that a rollback has nothing to undo for them once it is done. Each must
// be a step (a check changes nothing) that has run before it: an earlier
// phase, or a step it depends on, directly or not.
func (ld *load) resolveDiscards() {
	for _, d := range ld.allSteps {
		if d.dup || len(d.discards) == 0 || d.inst.isTemplate() {
			continue
		}
		var ok, discards []stepRef
		for _, r := range d.discards {
			if r.addr.Type == "" { // a whole group call, or one instance
				if ld.checkWholeGroup(r) {
					discards = append(discards, ld.expandRefs([]stepRef{r})...)
				}
				continue
			}
			discards = append(discards, r)
		}
		for _, r := range discards {
			target := ld.steps[r.addr]
			var detail string
			switch {
			case target == nil:
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Reference to Undeclared Step", Detail: ld.undeclaredStepDetail(r.addr), Subject: r.rng.Ptr()})
				continue
			case target == d:
				detail = fmt.Sprintf("The step %s cannot discard itself: list the steps whose effects it destroys with its own.", d.addr())
			case target.isCheck:
				detail = fmt.Sprintf("%s is a check: it changes nothing, so there is nothing for %s to discard. Remove it from discards.", r.addr, d.addr())
			case target.phase == d.phase && !ld.dependsOn(d, r.addr):
				detail = fmt.Sprintf("The step %s discards %s, but does not depend on it: it could run first, and destroy nothing of it. Add %s to its depends_on (or refer to its outputs).", d.addr(), r.addr, r.addr)
			case target.phase != d.phase && !ld.runsBefore(target.phase, d.phase):
				detail = fmt.Sprintf("The step %s in phase %q discards %s of phase %q, which does not run before it. Discard only what has run before: a step of an earlier phase, or one it depends on.",
					d.addr(), d.phase.block.Name, r.addr, target.phase.block.Name)
			default:
				ok = append(ok, r)
				continue
			}
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid discards Entry", Detail: detail, Subject: r.rng.Ptr()})
		}
		d.step.Discards = ld.uniqueAddrs(ok)
	}
}

// dependsOn reports whether d depends on addr, directly or through other
// steps of its phase.
func (ld *load) dependsOn(d *stepDecl, addr phases.Address) bool {
	seen := map[phases.Address]bool{}
	stack := append([]phases.Address(nil), d.step.DependsOn...)
	for len(stack) > 0 {
		a := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if a.Base() == addr {
			return true
		}
		if seen[a] {
			continue
		}
		seen[a] = true
		if dep := ld.steps[a.Base()]; dep != nil && dep.phase == d.phase {
			stack = append(stack, dep.step.DependsOn...)
		}
	}
	return false
}
