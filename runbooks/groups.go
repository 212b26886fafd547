package runbooks

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// A group is a directory of HCL that a phase calls, Terraform's module
// as the model: its variable blocks are the inputs, its output blocks
// what the caller may use, and its step and check blocks join the
// calling phase under the call's address, group.CALL.TYPE.NAME (or
// group.CALL["KEY"].TYPE.NAME for a call with for_each). Inside the
// group, var, local and TYPE.NAME are the group's own; the caller sees
// only group.CALL.OUTPUT.

// groupBlock is group "NAME" { source = "./DIR" ... } in a phase.
type groupBlock struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`
	Body      hcl.Body  `hcl:",remain"`
	DefRange  hcl.Range `hcl:",def_range"`
}

// groupFile is the top level of a file of a group.
type groupFile struct {
	Variables []*variableBlock `hcl:"variable,block"`
	Locals    []*localsBlock   `hcl:"locals,block"`
	Outputs   []*outputBlock   `hcl:"output,block"`
	Steps     []*stepBlock     `hcl:"step,block"`
	Checks    []*stepBlock     `hcl:"check,block"`
}

type outputBlock struct {
	Name        string         `hcl:"name,label"`
	NameRange   hcl.Range      `hcl:"name,label_range"`
	Value       hcl.Expression `hcl:"value"`
	Description string         `hcl:"description,optional"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

// notInGroup are the top-level blocks of a runbook a group may not hold:
// they belong to the runbook as a whole.
var notInGroup = map[string]string{
	"phase":    "its steps join the phase that calls the group",
	"provider": "steps take the runbook's providers (the call's providers argument chooses among them)",
	"backend":  "the state belongs to the runbook",
	"role":     "roles describe the runbook's host",
	"moved":    "write moved blocks in the runbook, with the grouped addresses",
	"removed":  "write removed blocks in the runbook, with the grouped addresses",
	"group":    "groups do not call groups: call both from the phase",
}

var groupCallSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "source", Required: true}, {Name: "for_each"}, {Name: "depends_on"}, {Name: "providers"},
}}

// groupCall is one group block of a phase.
type groupCall struct {
	name      string
	block     *groupBlock
	phase     *phaseDecl
	forEach   *forEach
	keys      []string // "" alone without for_each
	insts     map[string]*groupInst
	deps      []stepRef                 // depends_on of the call: every step of it waits for them
	providers map[string]hcl.Expression // provider type -> TYPE.NAME of a root provider block
	outputs   map[string]bool           // the outputs the group declares
	rootScope *scope                    // where its arguments are evaluated
	// template is, for a call whose for_each is empty, the group declared
	// without a key: only what a removed instance is reverted with.
	template *groupInst
}

// groupInst is one instance of a call: the scope its steps evaluate in.
type groupInst struct {
	call     *groupCall
	key      string
	vars     map[string]*variable
	varOrder []*variable
	locals   map[string]*localValue
	order    []*localValue // locals in the order they were evaluated
	scope    *scope
	inputs   map[string]*groupInput // inputs that refer to steps or groups, by variable
	outputs  map[string]*outputBlock
	outRefs  map[string][]stepRef // by output: what its expression refers to
	outEval  map[string]evalRefs  // by output: the same, as its evaluation needs them
	steps    []*stepDecl

	inputSteps                []stepRef // inputDeps, once worked out
	inputsExpanded, expanding bool
}

// evalRefs is what an expression's context holds: the outputs of steps
// and of groups.
type evalRefs struct {
	steps []phases.Address
	outs  []*groupOutRef
}

// evalRefs splits references for an evaluation context.
func (ld *load) evalRefs(refs []stepRef) evalRefs {
	var e evalRefs
	var steps []stepRef
	for _, r := range refs {
		if r.out != nil {
			e.outs = append(e.outs, r.out)
		} else if r.addr.Type != "" {
			steps = append(steps, r)
		}
	}
	e.steps = ld.uniqueAddrs(steps)
	return e
}

// groupInput is an argument of a call computed from step outputs: known
// only when they are, so evaluated again with them.
type groupInput struct {
	v    *variable
	expr hcl.Expression
	refs []stepRef // steps and group outputs, in the caller's scope
	eval evalRefs
}

// groupOutRef is a reference from the caller to a group's output: one
// instance's, or every instance's when the key is not literal.
type groupOutRef struct {
	call *groupCall
	key  string // the instance; all of them when all
	all  bool
	name string // "" for every output
}

// prefix is the address every step of the instance starts with.
func (g *groupInst) prefix(a phases.Address) phases.Address {
	a.Group, a.GroupKey = g.call.name, g.key
	return a
}

func (g *groupInst) String() string {
	return g.prefix(phases.Address{}).GroupPrefix()
}

// loadContext is what a reference means where it is written: var, local
// and TYPE.NAME of the runbook, or of one group instance.
type loadContext struct {
	vars     map[string]*variable
	varOrder []*variable
	locals   map[string]*localValue
	order    []*localValue
	scope    *scope
	cur      *groupInst
}

// within runs f with the references of group instance g, and keeps
// what f declared there (variables, locals) in g.
func (ld *load) within(g *groupInst, f func()) {
	saved := ld.loadContext
	ld.loadContext = loadContext{vars: g.vars, varOrder: g.varOrder, locals: g.locals, order: g.order, scope: g.scope, cur: g}
	defer func() {
		g.vars, g.varOrder, g.locals, g.order = ld.vars, ld.varOrder, ld.locals, ld.order
		ld.loadContext = saved
	}()
	f()
}

// local is addr as written where the loader is: prefixed with the group
// instance inside a group.
func (ld *load) local(addr phases.Address) phases.Address {
	if ld.cur != nil {
		return ld.cur.prefix(addr)
	}
	return addr
}

// callGroup declares a group block of a phase: its source read, its
// instances made, their steps declared in the phase.
func (ld *load) callGroup(pd *phaseDecl, b *groupBlock) {
	if ld.cur != nil {
		return // groups hold no group blocks: reported where the file is read
	}
	if !ld.validName("Group", "group", b.Name, b.NameRange, ", so that it can be referred to as group.NAME") {
		return
	}
	if prev, ok := ld.groups[b.Name]; ok {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate Group Call",
			Detail:  fmt.Sprintf("A group named %q was already called at %s. Its steps are addressed group.%s.TYPE.NAME, so call names are unique across the runbook.", b.Name, prev.block.DefRange, b.Name),
			Subject: b.DefRange.Ptr()})
		return
	}
	call := &groupCall{name: b.Name, block: b, phase: pd, insts: map[string]*groupInst{}, outputs: map[string]bool{}, rootScope: ld.scope}
	ld.groups[b.Name] = call
	ld.groupOrder = append(ld.groupOrder, call)
	content, remain, diags := b.Body.PartialContent(groupCallSchema)
	ld.diags = append(ld.diags, diags...)
	if content == nil {
		return
	}
	srcAttr := content.Attributes["source"]
	if srcAttr == nil {
		return
	}
	files := ld.groupSource(srcAttr)
	if a := content.Attributes["for_each"]; a != nil {
		call.forEach = ld.decodeForEach(a)
		call.keys = call.forEach.keys
	} else {
		call.keys = []string{""}
	}
	if a := content.Attributes["depends_on"]; a != nil {
		call.deps = ld.decodeStepRefs(a)
	}
	if a := content.Attributes["providers"]; a != nil {
		call.providers = ld.decodeGroupProviders(a)
	}
	args, diags := remain.JustAttributes()
	ld.diags = append(ld.diags, diags...)
	if files == nil {
		return
	}
	before := len(ld.diags)
	for i, k := range call.keys {
		ld.instantiate(call, k, files, args, i == 0)
	}
	ld.calledAt(call, before)
	if call.forEach != nil && len(call.keys) == 0 {
		// No instance, yet the records of those the map had may need
		// undoing: the group's steps are declared once, unkeyed, as the
		// templates of their revert, and nothing else (their mistakes
		// are for the day the map has a key).
		before := len(ld.diags)
		call.template = ld.instantiate(call, "", files, args, false)
		ld.diags = ld.diags[:before]
	}
}

// calledAt adds the call site to the diagnostics from diags[from:] that
// point into the group's files: a mistake there is the call's too, and a
// group called twice may be wrong for one call only.
func (ld *load) calledAt(call *groupCall, from int) {
	site := call.block.DefRange
	for _, d := range ld.diags[from:] {
		if d.Subject == nil || d.Subject.Filename == site.Filename || strings.Contains(d.Detail, "(In the group called as ") {
			continue
		}
		d.Detail = strings.TrimSpace(d.Detail + fmt.Sprintf(" (In the group called as group.%s at %s:%d.)", call.name, site.Filename, site.Start.Line))
	}
}

// groupSourceFile is a file of a group's directory.
type groupSourceFile struct {
	name string // its path in the fs.FS, the name diagnostics use
	src  []byte
}

// groupSource reads the *.hcl files of the directory source names: a
// path relative to the runbook, inside it.
func (ld *load) groupSource(a *hcl.Attribute) []groupSourceFile {
	v, ok := ld.staticValue(a.Expr, cty.String, "source")
	if !ok {
		return nil
	}
	bad := func(detail string) []groupSourceFile {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Group Source", Detail: detail, Subject: a.Expr.Range().Ptr()})
		return nil
	}
	src := v.AsString()
	if !strings.HasPrefix(src, "./") {
		return bad(fmt.Sprintf("The source of a group is a directory of the runbook, written from the runbook's directory and starting with ./, as in source = \"./groups/app\"; %q is not one.", src))
	}
	dir := path.Clean(strings.TrimPrefix(src, "./"))
	if !fs.ValidPath(dir) || dir == "." || strings.HasPrefix(dir, "../") {
		return bad(fmt.Sprintf("The source %q leads out of the runbook's directory, or to the runbook itself: a group is a directory inside it, as in source = \"./groups/app\".", src))
	}
	if cached, ok := ld.sources[dir]; ok {
		return cached
	}
	entries, err := fs.ReadDir(ld.fsys, dir)
	if err != nil {
		ld.sources[dir] = nil
		return bad(fmt.Sprintf("The group directory %s cannot be read: %s. The source is a directory of *.hcl files inside the runbook's directory.", dir, trimErr(err)))
	}
	var files []groupSourceFile
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".hcl") {
			continue
		}
		name := path.Join(dir, e.Name())
		b, err := fs.ReadFile(ld.fsys, name)
		if err != nil {
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot Read Group File", Detail: fmt.Sprintf("The file %s cannot be read: %s.", name, err), Subject: a.Expr.Range().Ptr()})
			continue
		}
		if d := notText(b, name); d != nil {
			ld.diags = append(ld.diags, d)
			continue
		}
		files = append(files, groupSourceFile{name: name, src: b})
	}
	if len(files) == 0 {
		bad(fmt.Sprintf("The group directory %s holds no .hcl files.", dir))
		files = []groupSourceFile{}
	}
	ld.sources[dir] = files
	return files
}

// decodeGroupProviders reads providers = { TYPE = TYPE.NAME, ... }: the
// provider block that runs the group's steps of each type.
func (ld *load) decodeGroupProviders(a *hcl.Attribute) map[string]hcl.Expression {
	pairs, diags := hcl.ExprMap(a.Expr)
	if diags.HasErrors() {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Group Providers",
			Detail:  "The providers argument of a group call maps a provider type to one of the runbook's provider blocks, as in providers = { talos = talos.rehearsal }.",
			Subject: a.Expr.Range().Ptr()})
		return nil
	}
	out := map[string]hcl.Expression{}
	for _, p := range pairs {
		tr, diags := hcl.AbsTraversalForExpr(p.Key)
		if diags.HasErrors() || len(tr) != 1 {
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Group Providers",
				Detail:  "Each key of providers is a provider type, without quotes, as in providers = { talos = talos.rehearsal }.",
				Subject: p.Key.Range().Ptr()})
			continue
		}
		out[tr.RootName()] = p.Value
	}
	return out
}

// instantiate makes one instance of a call: the group's files parsed
// again (a step's syntax is its own: the loader trims its meta-arguments
// from it), its inputs set from the call's arguments, its locals
// evaluated, its steps declared in the phase. Mistakes in the group's
// own files are reported by the first instance only.
func (ld *load) instantiate(call *groupCall, key string, files []groupSourceFile, args hcl.Attributes, first bool) *groupInst {
	g := &groupInst{call: call, key: key, vars: map[string]*variable{}, locals: map[string]*localValue{},
		inputs: map[string]*groupInput{}, outputs: map[string]*outputBlock{}, outRefs: map[string][]stepRef{}, outEval: map[string]evalRefs{}}
	var each cty.Value
	switch {
	case call.forEach != nil && len(call.keys) == 0:
		each = cty.ObjectVal(map[string]cty.Value{"key": cty.UnknownVal(cty.String), "value": cty.DynamicVal})
	case call.forEach != nil:
		each = call.forEach.each(key)
		call.insts[key] = g
	default:
		call.insts[key] = g
	}
	var gf groupFile
	for _, f := range files {
		parsed, diags := parseConfig(f.src, f.name)
		report := func(d hcl.Diagnostics) {
			if first {
				ld.diags = append(ld.diags, d...)
			}
		}
		report(diags)
		if parsed == nil || parsed.Body == nil {
			continue
		}
		if first {
			ld.files[f.name] = parsed
		}
		if body, ok := parsed.Body.(*hclsyntax.Body); ok {
			kept := body.Blocks[:0]
			for _, blk := range body.Blocks {
				if why, no := notInGroup[blk.Type]; no {
					report(hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Block Not Allowed in a Group",
						Detail:  fmt.Sprintf("A group's files hold variable, locals, output, step and check blocks; not %s blocks: %s.", blk.Type, why),
						Subject: blk.TypeRange.Ptr()}})
					continue
				}
				kept = append(kept, blk)
			}
			body.Blocks = kept
		}
		var one groupFile
		report(gohcl.DecodeBody(parsed.Body, nil, &one))
		gf.Variables = append(gf.Variables, one.Variables...)
		gf.Locals = append(gf.Locals, one.Locals...)
		gf.Outputs = append(gf.Outputs, one.Outputs...)
		gf.Steps = append(gf.Steps, one.Steps...)
		gf.Checks = append(gf.Checks, one.Checks...)
	}
	g.scope = &scope{stepTypes: call.rootScope.stepTypes, funcs: call.rootScope.funcs, unknown: call.rootScope.unknown,
		vars: cty.EmptyObjectVal, locals: cty.EmptyObjectVal, inst: g}
	ld.within(g, func() { ld.declareVariables(gf.Variables) })
	if first {
		for _, name := range sortedKeys(args) {
			if _, ok := g.vars[name]; !ok {
				a := args[name]
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported Argument",
					Detail: fmt.Sprintf("The group %s declares no variable %q.%s Its inputs are %s.", call.block.Name, name,
						didYouMean(name, sortedKeys(g.vars)), orNone(sortedKeys(g.vars))),
					Subject: a.NameRange.Ptr()})
			}
		}
	}
	vals := map[string]cty.Value{}
	for _, v := range g.varOrder {
		name := v.block.Name
		a := args[name]
		switch {
		case a != nil && refersToSteps(ld, a.Expr):
			// Known once the steps it refers to ran: resolveGroups
			// checks it, and each evaluation computes it again.
			g.inputs[name] = &groupInput{v: v, expr: a.Expr}
			v.value = cty.UnknownVal(v.typ)
		case a != nil:
			if call.forEach == nil && usesEach(a.Expr) {
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Reference to each",
					Detail: fmt.Sprintf("each.key and each.value exist only in a group call with for_each; group %q has none.", call.name), Subject: a.Expr.Range().Ptr()})
				v.value = cty.UnknownVal(v.typ)
				break
			}
			_, bad, diags := ld.checkRefs(a.Expr.Variables(), false, "")
			ld.diags = append(ld.diags, diags...)
			ctx := call.rootScope.evalContext(nil, nil, nil)
			if each != cty.NilVal {
				ctx.Variables["each"] = each
			}
			val, diags := a.Expr.Value(ctx)
			ld.diags = append(ld.diags, hideSensitive(dropWithin(diags, bad), ctx, a.Expr)...)
			if diags.HasErrors() {
				val = cty.DynamicVal
			}
			ld.setVariable(v, val, fmt.Sprintf("by the call of group %q", call.name), a.Expr.Range().Ptr())
		case v.value == cty.NilVal:
			if first {
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing Required Argument",
					Detail:  fmt.Sprintf("The group %s needs a value for its variable %q, which has no default: add %s = ... to the call.", call.block.Name, name, name),
					Subject: call.block.DefRange.Ptr()})
			}
			v.value = cty.UnknownVal(v.typ)
		}
		if v.block.Sensitive {
			ld.secrets = append(ld.secrets, plainStrings(v.value)...)
			v.value = v.value.Mark(phases.SensitiveMark)
		}
		vals[name] = v.value
	}
	g.scope.vars = cty.ObjectVal(vals)
	ld.within(g, func() {
		ld.validateVariables()
		ld.evalLocals(gf.Locals)
		for _, o := range gf.Outputs {
			if prev, ok := g.outputs[o.Name]; ok {
				if first {
					ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate Output",
						Detail: fmt.Sprintf("An output named %q was already declared at %s.", o.Name, prev.DefRange), Subject: o.DefRange.Ptr()})
				}
				continue
			}
			g.outputs[o.Name] = o
			call.outputs[o.Name] = true
		}
		type entry struct {
			b       *stepBlock
			isCheck bool
		}
		var entries []entry
		for _, sb := range gf.Checks {
			entries = append(entries, entry{sb, true})
		}
		for _, sb := range gf.Steps {
			entries = append(entries, entry{sb, false})
		}
		sort.SliceStable(entries, func(i, j int) bool {
			a, b := entries[i].b.DefRange, entries[j].b.DefRange
			if a.Filename != b.Filename {
				return a.Filename < b.Filename
			}
			return a.Start.Byte < b.Start.Byte
		})
		for _, e := range entries {
			ld.declareStep(call.phase, e.b, e.isCheck)
		}
	})
	return g
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return englishList(names)
}

// refersToSteps reports whether an expression of the caller uses step
// outputs or a group's outputs.
func refersToSteps(ld *load, e hcl.Expression) bool {
	for _, tr := range e.Variables() {
		if r := tr.RootName(); r == "group" || ld.isStepType(r) {
			return true
		}
	}
	return false
}

func usesEach(e hcl.Expression) bool {
	for _, tr := range e.Variables() {
		if tr.RootName() == "each" {
			return true
		}
	}
	return false
}

// resolveGroups, once every step is declared, checks the arguments that
// refer to steps and every output's expression.
func (ld *load) resolveGroups() {
	for _, call := range ld.groupOrder {
		before := len(ld.diags)
		for i, k := range call.keys {
			g := call.insts[k]
			if g == nil {
				continue
			}
			first := i == 0
			for _, name := range sortedKeys(g.inputs) {
				in := g.inputs[name]
				refs, _, diags := ld.checkRefs(in.expr.Variables(), true, "")
				if first {
					ld.diags = append(ld.diags, diags...)
				}
				in.refs, in.eval = refs, ld.evalRefs(refs)
			}
			ld.within(g, func() {
				for _, name := range sortedKeys(g.outputs) {
					o := g.outputs[name]
					refs, _, diags := ld.checkRefs(o.Value.Variables(), true, "")
					if first {
						ld.diags = append(ld.diags, diags...)
					}
					g.outRefs[name], g.outEval[name] = refs, ld.evalRefs(refs)
				}
			})
		}
		ld.calledAt(call, before)
	}
	ld.checkGroupCycles()
}

// checkGroupCycles refuses calls whose arguments use each other's
// outputs in a circle: with no step between them to order, their values
// would be computed from each other forever. The arguments of one call
// in the circle are dropped (left unknown), after the error.
func (ld *load) checkGroupCycles() {
	const (
		unseen = iota
		open
		done
	)
	state := map[*groupCall]int{}
	var visit func(c *groupCall, path []*groupCall) bool
	visit = func(c *groupCall, path []*groupCall) bool {
		switch state[c] {
		case open:
			var names []string
			start := slices.Index(path, c)
			for _, p := range path[start:] {
				names = append(names, "group."+p.name)
			}
			names = append(names, "group."+c.name)
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Dependency Cycle",
				Detail:  fmt.Sprintf("The arguments of these group calls use each other's outputs in a circle: %s. Pass one of them a value that does not come from the others.", strings.Join(names, " -> ")),
				Subject: c.block.DefRange.Ptr()})
			for _, g := range c.insts {
				g.inputs = map[string]*groupInput{}
			}
			return true
		case done:
			return false
		}
		state[c] = open
		path = append(path, c)
		for _, k := range c.keys {
			g := c.insts[k]
			if g == nil {
				continue
			}
			for _, name := range sortedKeys(g.inputs) {
				for _, r := range g.inputs[name].refs {
					if r.out != nil && visit(r.out.call, path) {
						state[c] = done
						return true
					}
				}
			}
		}
		state[c] = done
		return false
	}
	for _, c := range ld.groupOrder {
		visit(c, nil)
	}
}

// inputDeps are the steps the instance's computed inputs refer to (group
// outputs they use expanded into their steps), worked out once per
// instance: every step of the instance, and every reference to its
// outputs, waits for them. Calls in a circle have had their computed
// inputs dropped by checkGroupCycles; the expanding mark guards the
// recursion all the same.
func (ld *load) inputDeps(g *groupInst) []stepRef {
	if g.inputsExpanded || g.expanding {
		return g.inputSteps
	}
	g.expanding = true
	for _, name := range sortedKeys(g.inputs) {
		g.inputSteps = append(g.inputSteps, ld.expandRefs(g.inputs[name].refs)...)
	}
	g.expanding, g.inputsExpanded = false, true
	return g.inputSteps
}

// expandRefs replaces the references to groups (a whole call, an
// instance, an output) by the steps they stand for, keeping their
// ranges: what the step graph and the phase order check see.
func (ld *load) expandRefs(refs []stepRef) []stepRef {
	var out []stepRef
	for _, r := range refs {
		switch {
		case r.out != nil:
			for _, g := range r.out.instances() {
				for _, name := range sortedKeys(g.outputs) {
					if r.out.name != "" && name != r.out.name {
						continue
					}
					for _, d := range ld.expandRefs(g.outRefs[name]) {
						d.rng = r.rng
						out = append(out, d)
					}
				}
				for _, d := range ld.inputDeps(g) {
					d.rng = r.rng
					out = append(out, d)
				}
			}
		case r.addr.Type == "" && r.addr.Group != "":
			call := ld.groups[r.addr.Group]
			if call == nil {
				continue
			}
			for _, k := range call.keys {
				if r.addr.GroupKey != "" && k != r.addr.GroupKey {
					continue
				}
				if g := call.insts[k]; g != nil {
					for _, d := range g.steps {
						if !d.dup {
							out = append(out, stepRef{addr: d.addr(), rng: r.rng})
						}
					}
				}
			}
		default:
			out = append(out, r)
		}
	}
	return out
}

// instances are the instances an output reference reads.
func (o *groupOutRef) instances() []*groupInst {
	var out []*groupInst
	for _, k := range o.call.keys {
		if g := o.call.insts[k]; g != nil && (o.all || k == o.key) {
			out = append(out, g)
		}
	}
	return out
}

// checkGroupRef checks group.CALL[...] references of the runbook: the
// call exists, the key names an instance, the output is declared.
func (ld *load) checkGroupRef(tr hcl.Traversal, report func(hcl.Traversal, string, string)) (stepRef, bool) {
	if ld.cur != nil {
		report(tr, "Invalid Reference", "A group's files cannot refer to groups: what a group needs from another, the caller passes as an input (x = group.OTHER.OUTPUT).")
		return stepRef{}, false
	}
	name, ok := "", len(tr) > 1
	if ok {
		name, ok = traverserName(tr[1])
	}
	if !ok {
		report(tr, "Invalid Reference", "A reference to a group names its call and one of its outputs, as in group.NAME.OUTPUT.")
		return stepRef{}, false
	}
	call := ld.groups[name]
	if call == nil {
		report(tr, "Reference to Undeclared Group", fmt.Sprintf("No phase calls a group named %q.%s", name, ld.suggest(name, func() []string { return sortedKeys(ld.groups) })))
		return stepRef{}, false
	}
	o := &groupOutRef{call: call, all: true}
	rest := tr[2:]
	if call.forEach != nil && len(rest) > 0 {
		if idx, isIndex := rest[0].(hcl.TraverseIndex); isIndex {
			key, ok := traverserName(idx)
			if ok {
				key = phases.Name(key)
				if _, known := call.insts[key]; !known {
					report(tr, "Reference to Undeclared Instance", fmt.Sprintf("The group call %s has no instance %q: its for_each keys are %s.", name, key, quotedList(call.keys)))
					return stepRef{}, false
				}
				o.key, o.all = key, false
			}
			rest = rest[1:]
		} else {
			report(tr, "Missing Instance Key", fmt.Sprintf("The group call %s has for_each: name one instance, as in group.%s[\"KEY\"].OUTPUT, or index the map of its instances with an expression, as in group.%s[each.key].OUTPUT.", name, name, name))
			return stepRef{}, false
		}
	} else if call.forEach == nil {
		o.all = false
	}
	if len(rest) > 0 && o.all && call.forEach != nil {
		rest = rest[1:] // an expression index (each.key): every instance
	}
	if len(rest) > 0 {
		out, ok := traverserName(rest[0])
		if ok && !call.outputs[out] && len(call.insts) > 0 {
			report(tr, "Reference to Undeclared Output", fmt.Sprintf("The group %s has no output %q.%s Its outputs are %s.", name, out, didYouMean(out, sortedKeys(call.outputs)), orNone(sortedKeys(call.outputs))))
			return stepRef{}, false
		}
		o.name = out
	}
	return stepRef{rng: compact(tr.SourceRange()), out: o}, true
}

func quotedList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

// groupValue is group = { CALL = outputs } of an expression's context,
// with the outputs of the calls it refers to computed from the step
// outputs known now.
func groupValue(outs []*groupOutRef, outputs map[phases.Address]cty.Value) cty.Value {
	calls := map[string]map[string]cty.Value{}
	for _, o := range outs {
		m := calls[o.call.name]
		if m == nil {
			m = map[string]cty.Value{}
			calls[o.call.name] = m
		}
		for _, g := range o.instances() {
			v := g.outputsValue(outputs)
			if o.call.forEach == nil {
				for k, x := range v {
					m[k] = x
				}
				continue
			}
			m[g.key] = cty.ObjectVal(v)
		}
	}
	obj := make(map[string]cty.Value, len(calls))
	for name, m := range calls {
		obj[name] = cty.ObjectVal(m)
	}
	return cty.ObjectVal(obj)
}

// outputsValue evaluates every output of the instance.
func (g *groupInst) outputsValue(outputs map[phases.Address]cty.Value) map[string]cty.Value {
	m := make(map[string]cty.Value, len(g.outputs))
	for name, o := range g.outputs {
		e := g.outEval[name]
		ctx := g.scope.evalContext(e.steps, e.outs, outputs)
		v, diags := o.Value.Value(ctx)
		if diags.HasErrors() {
			v = cty.DynamicVal
		}
		m[name] = v
	}
	return m
}

// values are the instance's variables and locals, computed again from the
// step outputs known now when an input refers to steps.
func (g *groupInst) values(outputs map[phases.Address]cty.Value) (vars, locals cty.Value) {
	if len(g.inputs) == 0 || outputs == nil {
		return g.scope.vars, g.scope.locals
	}
	m := g.scope.vars.AsValueMap()
	for name, in := range g.inputs {
		ctx := g.call.rootScope.evalContext(in.eval.steps, in.eval.outs, outputs)
		if g.call.forEach != nil {
			ctx.Variables["each"] = g.call.forEach.each(g.key)
		}
		v, diags := in.expr.Value(ctx)
		if !diags.HasErrors() {
			if cv, err := convertVar(in.v, v); err == nil {
				if in.v.block.Sensitive {
					cv = cv.Mark(phases.SensitiveMark)
				}
				m[name] = cv
			}
		}
	}
	vars = cty.ObjectVal(m)
	lm := map[string]cty.Value{}
	for name, lv := range g.locals {
		lm[name] = lv.value
	}
	for _, lv := range g.order {
		ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": vars, "local": cty.ObjectVal(lm)}, Functions: g.scope.funcs}
		if v, diags := lv.attr.Expr.Value(ctx); !diags.HasErrors() {
			lm[lv.attr.Name] = v
		}
	}
	return vars, cty.ObjectVal(lm)
}

// isTemplate reports whether g is a call's template (an empty for_each),
// not an instance.
func (g *groupInst) isTemplate() bool { return g != nil && g.call.template == g }

// provider is the expression the call's providers argument gives for
// the group's steps of provider type pt.
func (g *groupInst) provider(pt string) (hcl.Expression, bool) {
	if g == nil {
		return nil, false
	}
	e, ok := g.call.providers[pt]
	return e, ok
}

// groupStepRef reads a depends_on entry that starts with group: a whole
// call (group.NAME), one instance (group.NAME["KEY"]) or one of its steps
// (group.NAME.TYPE.STEP, group.NAME["KEY"].TYPE.STEP["KEY"]). Whether
// they exist is checked once every step is declared.
func (ld *load) groupStepRef(attr string, tr hcl.Traversal, rng hcl.Range) (stepRef, bool) {
	bad := func() (stepRef, bool) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid " + attr + " Reference",
			Detail:  fmt.Sprintf("A %s entry names a group call as group.NAME (all its steps), group.NAME[\"KEY\"] (one instance) or group.NAME.TYPE.STEP (one step of it).", attr),
			Subject: rng.Ptr()})
		return stepRef{}, false
	}
	if ld.cur != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid " + attr + " Reference",
			Detail: "A group's files cannot refer to groups: the call's depends_on says what the whole group waits for.", Subject: rng.Ptr()})
		return stepRef{}, false
	}
	if len(tr) < 2 {
		return bad()
	}
	name, ok := traverserName(tr[1])
	if !ok {
		return bad()
	}
	a := phases.Address{Group: name}
	rest := tr[2:]
	if len(rest) > 0 {
		if idx, isIndex := rest[0].(hcl.TraverseIndex); isIndex {
			key, ok := traverserName(idx)
			if !ok {
				return bad()
			}
			a.GroupKey = phases.Name(key)
			rest = rest[1:]
		}
	}
	var key string
	switch len(rest) {
	case 0:
	case 2, 3:
		typ, ok1 := traverserName(rest[0])
		step, ok2 := traverserName(rest[1])
		if _, isAttr := rest[0].(hcl.TraverseAttr); !ok1 || !ok2 || !isAttr {
			return bad()
		}
		a.Type, a.Name = typ, step
		if len(rest) == 3 {
			k, isKey := instanceKey(hcl.Traversal{hcl.TraverseRoot{Name: typ}, rest[1], rest[2]})
			if !isKey {
				return bad()
			}
			key = k
		}
	default:
		return bad()
	}
	return stepRef{addr: ld.intern(a), key: key, rng: compact(rng)}, true
}

// checkWholeGroup reports a depends_on entry group.NAME or
// group.NAME["KEY"] that names no call or instance.
func (ld *load) checkWholeGroup(r stepRef) bool {
	call := ld.groups[r.addr.Group]
	var detail string
	switch {
	case call == nil:
		detail = fmt.Sprintf("No phase calls a group named %q.%s", r.addr.Group, ld.suggest(r.addr.Group, func() []string { return sortedKeys(ld.groups) }))
	case r.addr.GroupKey != "" && call.forEach == nil:
		detail = fmt.Sprintf("The group call %s has no for_each: refer to it as group.%s, without a key.", call.name, call.name)
	case r.addr.GroupKey != "" && call.insts[r.addr.GroupKey] == nil:
		detail = fmt.Sprintf("The group call %s has no instance %q: its for_each keys are %s.", call.name, r.addr.GroupKey, quotedList(call.keys))
	default:
		return true
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Reference to Undeclared Group", Detail: detail, Subject: r.rng.Ptr()})
	return false
}

// checkGroupObjectName refuses, in a group, a step of a type whose
// object is named after the step unless its block says otherwise: every
// call of the group would manage the one object named after the step.
func (ld *load) checkGroupObjectName(d *stepDecl) {
	if !d.namedAfterStep() {
		return
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing Instance Name",
		Detail: fmt.Sprintf("The %s %s.%s is in a group, and a %s is named after its step unless name says otherwise: every call of the group would manage the one named %q. Set name from the group's inputs, e.g. name = var.app.",
			d.kind(), d.block.Type, d.block.Name, d.block.Type, d.block.Name),
		Subject: d.block.DefRange.Ptr()})
}
