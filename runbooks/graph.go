package runbooks

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/phases"
)

// orderPhases fills Phase.After (from after, or the previous phase),
// reports unknown phases and cycles, and computes which phases run
// strictly before each one.
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

	// Cycles.
	g := newGraph(len(ld.phases))
	index := map[string]int{}
	for i, pd := range ld.phases {
		index[pd.block.Name] = i
	}
	for i, pd := range ld.phases {
		for _, e := range pd.after {
			g.addEdge(i, index[e.name], compact(e.rng))
		}
	}
	for _, cyc := range g.cycles() {
		var members, path []string
		for _, i := range cyc.members {
			members = append(members, "phase."+ld.phases[i].block.Name)
		}
		for _, i := range cyc.path {
			path = append(path, "phase."+ld.phases[i].block.Name)
		}
		detail := fmt.Sprintf("The phases %s each wait for another in a cycle: %s (read \"->\" as \"runs after\"). Change an after argument to break it; a phase without after runs after the phase declared before it.",
			englishList(members), strings.Join(path, " -> "))
		if len(cyc.members) == 1 {
			detail = fmt.Sprintf("The phase %q cannot run after itself. Remove phase.%s from its after argument.",
				ld.phases[cyc.members[0]].block.Name, ld.phases[cyc.members[0]].block.Name)
		}
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Phase Order Cycle",
			Detail:   detail,
			Subject:  cyc.rng.Ptr(),
		})
	}

	// Transitive predecessors.
	for i, pd := range ld.phases {
		pd.before = map[string]bool{}
		stack := []int{i}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, e := range g.edges[n] {
				name := ld.phases[e.to].block.Name
				if !pd.before[name] {
					pd.before[name] = true
					stack = append(stack, e.to)
				}
			}
		}
	}
}

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
		if !d.dup {
			byPhase[d.phase] = append(byPhase[d.phase], d)
		}
	}
	for _, pd := range ld.phases {
		members := byPhase[pd]
		index := map[phases.Address]int{}
		for i, d := range members {
			index[d.addr()] = i
		}
		g := newGraph(len(members))
		for i, d := range members {
			reported := map[phases.Address]bool{}
			for _, r := range d.deps {
				if reported[r.addr] {
					continue
				}
				reported[r.addr] = true
				if j, same := index[r.addr]; same {
					g.addEdge(i, j, r.rng)
					ld.checkCheckOrder(d, members[j], r.rng.hcl())
					continue
				}
				ld.checkPhaseOrder(d, ld.steps[r.addr], r.rng.hcl())
			}
		}
		for _, cyc := range g.cycles() {
			var names, path []string
			for _, i := range cyc.members {
				names = append(names, members[i].addr().String())
			}
			for _, i := range cyc.path {
				path = append(path, members[i].addr().String())
			}
			detail := fmt.Sprintf("The steps %s depend on each other in a cycle: %s. Remove a reference or a depends_on entry to break it.",
				englishList(names), strings.Join(path, " -> "))
			if len(cyc.members) == 1 {
				detail = fmt.Sprintf("The %s %s depends on itself (%s). A step or check cannot use its own outputs or wait for itself.",
					members[cyc.members[0]].kind(), names[0], strings.Join(path, " -> "))
			}
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Dependency Cycle",
				Detail:   detail,
				Subject:  cyc.rng.Ptr(),
			})
		}
	}
}

// checkPhaseOrder reports a dependency on a step of a phase that does not
// run strictly before the dependent's phase.
func (ld *load) checkPhaseOrder(d, dep *stepDecl, rng hcl.Range) {
	if dep == nil || d.phase.before[dep.phase.block.Name] {
		return
	}
	p, q := d.phase.block.Name, dep.phase.block.Name
	if dep.phase.before[p] {
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
		if d.isCheck {
			d.phase.phase.Checks = append(d.phase.phase.Checks, d.step)
		} else {
			d.phase.phase.Steps = append(d.phase.phase.Steps, d.step)
		}
	}
	return rb
}

// graph is a small directed graph for cycle detection.
type graph struct {
	edges [][]edge
}

type edge struct {
	to  int
	rng srcRange
}

type cycle struct {
	members []int     // in index order
	path    []int     // first member -> ... -> first member
	rng     hcl.Range // the first edge of path
}

func newGraph(n int) *graph { return &graph{edges: make([][]edge, n)} }

func (g *graph) addEdge(from, to int, rng srcRange) {
	g.edges[from] = append(g.edges[from], edge{to: to, rng: rng})
}

// cycles returns one cycle per strongly connected component that has one
// (Tarjan's algorithm), naming all its members and one path through it.
func (g *graph) cycles() []cycle {
	n := len(g.edges)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var sccs [][]int
	next := 0
	var strong func(v int)
	strong = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, e := range g.edges[v] {
			if index[e.to] < 0 {
				strong(e.to)
				low[v] = min(low[v], low[e.to])
			} else if onStack[e.to] {
				low[v] = min(low[v], index[e.to])
			}
		}
		if low[v] == index[v] {
			var scc []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == v {
					break
				}
			}
			sccs = append(sccs, scc)
		}
	}
	for v := 0; v < n; v++ {
		if index[v] < 0 {
			strong(v)
		}
	}

	var out []cycle
	for _, scc := range sccs {
		sort.Ints(scc)
		in := map[int]bool{}
		for _, v := range scc {
			in[v] = true
		}
		start := scc[0]
		if len(scc) == 1 {
			self := false
			var rng hcl.Range
			for _, e := range g.edges[start] {
				if e.to == start {
					self, rng = true, e.rng.hcl()
					break
				}
			}
			if self {
				out = append(out, cycle{members: scc, path: []int{start, start}, rng: rng})
			}
			continue
		}
		// Shortest way back to start, within the component.
		prev := map[int]int{}
		firstRng := map[int]hcl.Range{}
		queue := []int{}
		for _, e := range g.edges[start] {
			if in[e.to] {
				if _, ok := prev[e.to]; !ok {
					prev[e.to] = start
					firstRng[e.to] = e.rng.hcl()
					queue = append(queue, e.to)
				}
			}
		}
		found := false
		for len(queue) > 0 && !found {
			v := queue[0]
			queue = queue[1:]
			if v == start {
				found = true
				break
			}
			for _, e := range g.edges[v] {
				if !in[e.to] {
					continue
				}
				if _, ok := prev[e.to]; !ok {
					prev[e.to] = v
					queue = append(queue, e.to)
				}
			}
		}
		path := []int{start}
		for v := prev[start]; v != start; v = prev[v] {
			path = append(path, v)
			if len(path) > len(scc)+1 {
				break
			}
		}
		// path is start, then predecessors back to start's successor:
		// reverse all but the first to read forwards.
		rest := path[1:]
		for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
			rest[i], rest[j] = rest[j], rest[i]
		}
		path = append(path, start)
		rng := hcl.Range{}
		if len(path) > 1 {
			rng = firstRng[path[1]]
		}
		out = append(out, cycle{members: scc, path: path, rng: rng})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].members[0] < out[j].members[0] })
	return out
}
