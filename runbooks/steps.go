package runbooks

import (
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/homelab-migrate/migrate/phases"
)

const (
	defaultAttempts = 1
	defaultBackoff  = time.Second
	implicitName    = "default"
)

type phaseDecl struct {
	block *phaseBlock
	phase *phases.Phase
	after []phaseEdge
	idx   int // in ld.phases: its node in the phase graph
}

type phaseEdge struct {
	name string
	rng  hcl.Range
}

type stepDecl struct {
	block    *stepBlock
	phase    *phaseDecl
	info     stepTypeInfo
	isCheck  bool
	dup      bool // a duplicate address: checked, but not part of the runbook
	step     *phases.Step
	body     hcl.Body // the attributes left after the meta-arguments
	provider *hcl.Attribute
	prov     *providerDecl // the block that runs it, nil for an implicit one
	explicit []stepRef     // depends_on entries
	deps     []stepRef     // explicit and referenced, all declared
	discards []stepRef     // discards entries (steps only)
	forEach  *forEach      // nil without for_each
	inst     *groupInst    // the group instance that made it; nil in a phase
}

func (d *stepDecl) addr() phases.Address { return d.step.Addr }

func (d *stepDecl) kind() string {
	if d.isCheck {
		return "check"
	}
	return "step"
}

func (ld *load) declarePhases(blocks []*phaseBlock) {
	for _, b := range blocks {
		if prev, ok := ld.phaseIdx[b.Name]; ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Phase",
				Detail:   fmt.Sprintf("A phase named %q was already declared at %s. Phase names must be unique; the steps of this block are not checked.", b.Name, prev.block.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		ld.validName("Phase", "phase", b.Name, b.NameRange, "")
		pd := &phaseDecl{block: b, phase: &phases.Phase{
			Name: b.Name, Description: b.Description, Range: toRange(b.DefRange),
		}}
		ld.phaseIdx[b.Name] = pd
		ld.phases = append(ld.phases, pd)
		// Declare checks and steps in source order, so that a duplicate
		// is always the later one.
		type entry struct {
			b       *stepBlock
			g       *groupBlock
			isCheck bool
		}
		var entries []entry
		for _, sb := range b.Checks {
			entries = append(entries, entry{b: sb, isCheck: true})
		}
		for _, sb := range b.Steps {
			entries = append(entries, entry{b: sb})
		}
		for _, gb := range b.Groups {
			entries = append(entries, entry{g: gb})
		}
		start := func(e entry) int {
			if e.g != nil {
				return e.g.DefRange.Start.Byte
			}
			return e.b.DefRange.Start.Byte
		}
		sort.SliceStable(entries, func(i, j int) bool { return start(entries[i]) < start(entries[j]) })
		for _, e := range entries {
			if e.g != nil {
				ld.callGroup(pd, e.g)
				continue
			}
			ld.declareStep(pd, e.b, e.isCheck)
		}
	}
}

// metaSchema is the schema of a step's meta-arguments. An attribute of the
// step type with the same name as a meta-argument wins: http_check's own
// timeout is the provider's, not the step's.
func metaSchema(st phases.StepType, isCheck bool) *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, name := range []string{"provider", "depends_on", "discards", "timeout", "when", "for_each"} {
		if name == "when" && !isCheck || name == "discards" && isCheck {
			continue
		}
		if _, shadowed := st.Attributes[name]; !shadowed {
			s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: name})
		}
	}
	if _, shadowed := st.Attributes["retry"]; !shadowed {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: "retry"})
	}
	return s
}

// stripMeta returns the body a step's evaluator decodes: its own
// attributes and blocks, without the meta-arguments of schema. For
// hclsyntax bodies the meta-arguments are deleted from the parsed body
// itself, which nothing reads again: PartialContent's remain only hides
// them, and a depends_on list is most of a big runbook's syntax tree,
// needed no more once decoded into addresses.
func stripMeta(body, remain hcl.Body, schema *hcl.BodySchema) hcl.Body {
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		return remain
	}
	for _, a := range schema.Attributes {
		delete(sb.Attributes, a.Name)
	}
	blocks := sb.Blocks[:0]
	for _, blk := range sb.Blocks {
		meta := false
		for _, bs := range schema.Blocks {
			meta = meta || blk.Type == bs.Type
		}
		if !meta {
			blocks = append(blocks, blk)
		}
	}
	sb.Blocks = blocks
	return sb
}

func (ld *load) declareStep(pd *phaseDecl, b *stepBlock, isCheck bool) {
	kind := "step"
	if isCheck {
		kind = "check"
	}
	info, ok := ld.stepTypes[b.Type]
	if !ok {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown Step Type",
			Detail:   fmt.Sprintf("No provider offers a step type named %q.%s", b.Type, didYouMean(b.Type, sortedKeys(ld.stepTypes))),
			Subject:  b.TypeRange.Ptr(),
		})
		return
	}
	if !ld.validName("Step", kind, b.Name, b.NameRange, fmt.Sprintf(", so that it can be referred to as %s.NAME", b.Type)) {
		return
	}
	ld.checkKind(b, info, isCheck)

	addr := ld.local(phases.Address{Type: b.Type, Name: b.Name})
	d := &stepDecl{block: b, phase: pd, info: info, isCheck: isCheck, inst: ld.cur, step: &phases.Step{
		Addr:  addr,
		Phase: pd.block.Name,
		Retry: phases.RetryPolicy{Attempts: defaultAttempts, Backoff: defaultBackoff},
		Range: toRange(b.DefRange),
	}}
	if prev, ok := ld.steps[addr]; ok {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate Step Address",
			Detail: fmt.Sprintf("The %s %s was already declared at %s. Addresses (TYPE.NAME) must be unique across the whole runbook (and a group's across its files), steps and checks together, so that any step can refer to it.",
				prev.kind(), addr, prev.block.DefRange),
			Subject: b.DefRange.Ptr(),
		})
		d.dup = true
	} else {
		ld.steps[addr] = d
	}
	ld.allSteps = append(ld.allSteps, d)
	if ld.cur != nil {
		ld.cur.steps = append(ld.cur.steps, d)
		ld.checkGroupObjectName(d)
	}

	if b.Body == nil {
		d.body = hcl.EmptyBody()
		return
	}
	schema := metaSchema(info.typ, isCheck)
	content, remain, diags := b.Body.PartialContent(schema)
	ld.diags = append(ld.diags, diags...)
	d.body = stripMeta(b.Body, remain, schema)
	if content == nil {
		return
	}
	ld.decodeMeta(d, content, kind)
}

// checkKind reports a step type declared with the wrong block: one that
// makes changes as a check, or a check-only one as a step.
func (ld *load) checkKind(b *stepBlock, info stepTypeInfo, isCheck bool) {
	switch {
	case isCheck && !info.typ.CanCheck && !info.typ.CheckOnly:
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Step Type Cannot Be a Check",
			Detail:   fmt.Sprintf("Steps of type %s make changes and cannot gate a phase. Declare it with a step block instead, or use a type that can check, such as %s.", b.Type, englishList(ld.checkTypes())),
			Subject:  b.TypeRange.Ptr(),
		})
	case !isCheck && info.typ.CheckOnly:
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Step Type Only Valid in Check",
			Detail:   fmt.Sprintf("Steps of type %s only observe; declare it with a check block: check %q %q { ... }.", b.Type, b.Type, b.Name),
			Subject:  b.TypeRange.Ptr(),
		})
	}
}

// decodeMeta decodes the meta-arguments of a step or check (provider,
// depends_on, discards, timeout, when, retry) into d.
func (ld *load) decodeMeta(d *stepDecl, content *hcl.BodyContent, kind string) {
	isCheck := d.isCheck
	d.provider = content.Attributes["provider"]
	if a := content.Attributes["depends_on"]; a != nil {
		d.explicit = ld.decodeStepRefs(a)
	}
	if a := content.Attributes["discards"]; a != nil {
		d.discards = ld.decodeStepRefs(a)
	}
	if a := content.Attributes["for_each"]; a != nil {
		d.forEach = ld.decodeForEach(a)
		ld.checkInstanceName(d, a)
	}
	if a := content.Attributes["timeout"]; a != nil {
		if dur, ok := ld.duration(a.Expr, "timeout", true); ok {
			d.step.Timeout = dur
		}
	}
	if a := content.Attributes["when"]; a != nil {
		d.step.When = ld.decodeWhen(a)
	}
	if isCheck && d.step.When == "" {
		d.step.When = phases.CheckAfter
	}
	var retries []*hcl.Block
	for _, blk := range content.Blocks {
		if blk.Type == "retry" {
			retries = append(retries, blk)
		}
	}
	for i, blk := range retries {
		if i > 0 {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Retry Block",
				Detail:   fmt.Sprintf("A %s has at most one retry block; the first is at %s.", kind, retries[0].DefRange),
				Subject:  blk.DefRange.Ptr(),
			})
			continue
		}
		d.step.Retry = ld.decodeRetry(blk)
	}
}

func (ld *load) checkTypes() []string {
	var out []string
	for _, name := range sortedKeys(ld.stepTypes) {
		if t := ld.stepTypes[name].typ; t.CanCheck || t.CheckOnly {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return []string{"(none in the installed providers)"}
	}
	return out
}

// staticValue evaluates a meta-argument: variables, locals and functions
// are allowed, step outputs are not. ok is false when the value is unusable
// (already reported, or unknown because of an earlier error).
func (ld *load) staticValue(expr hcl.Expression, ty cty.Type, name string) (cty.Value, bool) {
	_, bad, diags := ld.checkRefs(expr.Variables(), false, fmt.Sprintf("The %s argument", name))
	ld.diags = append(ld.diags, diags...)
	if len(bad) > 0 {
		return cty.NilVal, false
	}
	ctx := ld.scope.evalContext(nil, nil, nil)
	v, diags := expr.Value(ctx)
	ld.diags = append(ld.diags, hideSensitive(diags, ctx, expr)...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if containsSensitive(v) {
		// Callers quote the value in their own errors, and a plan shows it.
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Sensitive Value in a Meta-Argument",
			Detail:   fmt.Sprintf("The %s argument cannot be computed from a sensitive value: it is shown in plans and logs. Give it a value that is not secret.", name),
			Subject:  expr.Range().Ptr(),
		})
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() || v.IsNull() {
		return cty.NilVal, false // unknown after an earlier error; null means unset
	}
	cv, err := convert.Convert(v, ty)
	if err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect Attribute Value Type",
			Detail:   fmt.Sprintf("Inappropriate value for %s: %s is required: %s.", name, ty.FriendlyName(), err),
			Subject:  expr.Range().Ptr(),
		})
		return cty.NilVal, false
	}
	return cv, true
}

// duration decodes a Go duration string ("30s", "5m").
func (ld *load) duration(expr hcl.Expression, name string, zeroOK bool) (time.Duration, bool) {
	v, ok := ld.staticValue(expr, cty.String, name)
	if !ok {
		return 0, false
	}
	s := v.AsString()
	dur, err := time.ParseDuration(s)
	if err == nil && (dur < 0 || (dur == 0 && !zeroOK)) {
		err = fmt.Errorf("it must be positive")
	}
	if err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid Duration",
			Detail:   fmt.Sprintf("The %s must be a duration such as \"30s\", \"5m\" or \"1h30m\"; %q is not one: %s.", name, s, trimErr(err)),
			Subject:  expr.Range().Ptr(),
		})
		return 0, false
	}
	return dur, true
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 0 && s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

func (ld *load) decodeWhen(a *hcl.Attribute) phases.CheckWhen {
	v, ok := ld.staticValue(a.Expr, cty.String, "when")
	if !ok {
		return phases.CheckAfter
	}
	switch w := phases.CheckWhen(v.AsString()); w {
	case phases.CheckBefore, phases.CheckAfter:
		return w
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid Check Timing",
		Detail:   fmt.Sprintf("The when argument of a check is \"before\" (the phase does not start until it passes) or \"after\" (the phase is not complete until it passes), not %q.", v.AsString()),
		Subject:  a.Expr.Range().Ptr(),
	})
	return phases.CheckAfter
}

var retrySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "attempts"}, {Name: "backoff"}}}

func (ld *load) decodeRetry(blk *hcl.Block) phases.RetryPolicy {
	p := phases.RetryPolicy{Attempts: defaultAttempts, Backoff: defaultBackoff}
	content, diags := blk.Body.Content(retrySchema)
	ld.diags = append(ld.diags, diags...)
	if content == nil {
		return p
	}
	if a := content.Attributes["attempts"]; a != nil {
		if v, ok := ld.staticValue(a.Expr, cty.Number, "attempts"); ok {
			bf := v.AsBigFloat()
			n, acc := bf.Int64()
			if acc != big.Exact || n < 1 || n > 1000 {
				ld.diags = append(ld.diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid Retry Attempts",
					Detail:   fmt.Sprintf("The attempts of a retry block count the tries in all, so they are a whole number from 1 (no retry) to 1000, not %s.", bf.Text('g', 10)),
					Subject:  a.Expr.Range().Ptr(),
				})
			} else {
				p.Attempts = int(n)
			}
		}
	}
	if a := content.Attributes["backoff"]; a != nil {
		if dur, ok := ld.duration(a.Expr, "backoff", true); ok {
			p.Backoff = dur
		}
	}
	return p
}

// decodeStepRefs reads a list of steps, depends_on = [TYPE.NAME, ...] (or
// discards). A leading "step." is accepted too (depends_on =
// [step.exec.a]).
func (ld *load) decodeStepRefs(a *hcl.Attribute) []stepRef {
	exprs, diags := hcl.ExprList(a.Expr)
	ld.diags = append(ld.diags, diags...)
	refs := make([]stepRef, 0, len(exprs))
	for _, e := range exprs {
		tr, diags := hcl.AbsTraversalForExpr(e)
		if diags.HasErrors() {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid " + a.Name + " Reference",
				Detail:   fmt.Sprintf("Each %s entry names a step or check as TYPE.NAME, as in %s = [exec.backup], without quotes.", a.Name, a.Name),
				Subject:  e.Range().Ptr(),
			})
			continue
		}
		if _, isType := ld.stepTypes["step"]; tr.RootName() == "step" && !isType && len(tr) > 1 {
			if name, ok := traverserName(tr[1]); ok {
				tr = append(hcl.Traversal{hcl.TraverseRoot{Name: name, SrcRange: tr[1].SourceRange()}}, tr[2:]...)
			}
		}
		if tr.RootName() == "group" {
			if r, ok := ld.groupStepRef(a.Name, tr, e.Range()); ok {
				refs = append(refs, r)
			}
			continue
		}
		key, keyed := instanceKey(tr)
		if len(tr) != 2 && !keyed {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid " + a.Name + " Reference",
				Detail:   fmt.Sprintf("Each %s entry names a whole step or check as TYPE.NAME (or one instance of a step with for_each as TYPE.NAME[\"KEY\"]), as in %s = [exec.backup], not one of its outputs.", a.Name, a.Name),
				Subject:  e.Range().Ptr(),
			})
			continue
		}
		name, _ := traverserName(tr[1])
		addr := ld.local(phases.Address{Type: tr.RootName(), Name: name})
		if _, ok := ld.stepTypes[addr.Type]; !ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Reference to Undeclared Step",
				Detail:   fmt.Sprintf("There is no step type %q.%s", addr.Type, didYouMean(addr.Type, sortedKeys(ld.stepTypes))),
				Subject:  e.Range().Ptr(),
			})
			continue
		}
		refs = append(refs, stepRef{addr: ld.intern(addr), key: key, rng: compact(e.Range())})
	}
	return refs
}

// instanceKey returns KEY of a traversal TYPE.NAME["KEY"] (exactly three
// parts, the third a string index).
func instanceKey(tr hcl.Traversal) (string, bool) {
	if len(tr) != 3 {
		return "", false
	}
	idx, ok := tr[2].(hcl.TraverseIndex)
	if !ok || idx.Key.Type() != cty.String || !idx.Key.IsKnown() || idx.Key.IsNull() || idx.Key.IsMarked() {
		return "", false
	}
	return phases.Name(idx.Key.AsString()), true
}

// resolveSteps, once every step is declared, resolves references,
// depends_on and providers, and decodes each step's attributes once with
// unknown outputs to report mistakes.
func (ld *load) resolveSteps() {
	for _, d := range ld.allSteps {
		if d.inst != nil {
			before := len(ld.diags)
			ld.within(d.inst, func() { ld.resolveStep(d) })
			if d.inst.isTemplate() {
				ld.diags = ld.diags[:before]
			}
			ld.calledAt(d.inst.call, before)
			continue
		}
		ld.resolveStep(d)
	}
}

func (ld *load) resolveStep(d *stepDecl) {
	{
		ld.resolveProvider(d)
		explicit := d.explicit
		if d.inst != nil {
			// The call's depends_on and the steps its arguments use.
			explicit = append(explicit[:len(explicit):len(explicit)], d.inst.call.deps...)
		}
		d.deps = d.explicit[:0] // filtered in place: big runbooks have many
		for _, r := range explicit {
			if r.addr.Type == "" {
				if ld.checkWholeGroup(r) {
					d.deps = append(d.deps, ld.expandRefs([]stepRef{r})...)
				}
				continue
			}
			target, ok := ld.steps[r.addr]
			if !ok {
				ld.diags = append(ld.diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Reference to Undeclared Step",
					Detail:   ld.undeclaredStepDetail(r.addr),
					Subject:  r.rng.Ptr(),
				})
				continue
			}
			if r.key != "" {
				if detail := target.keyProblem(r.key); detail != "" {
					ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Reference to Undeclared Instance", Detail: detail, Subject: r.rng.Ptr()})
					continue
				}
			}
			d.deps = append(d.deps, r)
		}
		d.explicit = nil
		spec := ld.spec("step:"+d.block.Type, d.info.typ.Attributes)
		vars := hcldec.Variables(d.body, spec)
		refs, bad, diags := ld.checkRefs(vars, true, "")
		ld.diags = append(ld.diags, diags...)
		bad = append(bad, ld.checkEach(d, vars)...)
		d.deps = append(d.deps, ld.expandRefs(refs)...)
		if d.inst != nil {
			d.deps = append(d.deps, ld.inputDeps(d.inst)...)
		}

		// The evaluation context needs only the steps the attributes use.
		er := ld.evalRefs(refs)
		ev := &evaluator{scope: ld.scope, body: d.body, spec: spec, refs: er.steps, outs: er.outs, sensitive: ld.sensitive(d.block.Type, d.info.typ)}
		if d.forEach != nil {
			ev.each = cty.ObjectVal(map[string]cty.Value{"key": cty.UnknownVal(cty.String), "value": cty.DynamicVal})
		}
		_, diags = ev.decode(nil)
		if d.forEach != nil && !diags.HasErrors() {
			// each.value known: report the first instance it does not fit.
			for _, k := range d.forEach.keys {
				inst := *ev
				inst.each = d.forEach.each(k)
				if _, diags = inst.decode(nil); diags.HasErrors() {
					break
				}
			}
		}
		ld.diags = append(ld.diags, dropWithin(diags, bad)...)
		d.step.Config = ev
		deps := d.deps
		if d.prov != nil && len(d.prov.refs) > 0 {
			deps = append(deps[:len(deps):len(deps)], d.prov.refs...)
		}
		for _, a := range ld.uniqueAddrs(deps) {
			if a.Base() != d.addr() {
				d.step.DependsOn = append(d.step.DependsOn, a)
			}
		}
	}
}

// sensitive lists (once per step type) the attributes to mark sensitive.
func (ld *load) sensitive(name string, st phases.StepType) []string {
	if names, ok := ld.sensitiveAttrs[name]; ok {
		return names
	}
	names := sensitiveNames(st.Attributes)
	ld.sensitiveAttrs[name] = names
	return names
}

// uniqueAddrs returns the addresses of refs, deduplicated and sorted: a
// reference to a step with for_each as a whole stands for all its
// instances, TYPE.NAME["KEY"] for one.
func (ld *load) uniqueAddrs(refs []stepRef) []phases.Address {
	seen := make(map[phases.Address]bool, len(refs))
	var addrs []phases.Address
	add := func(a phases.Address) {
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	for _, r := range refs {
		if r.out != nil || r.addr.Type == "" {
			continue // a group's: expandRefs gives its steps
		}
		target := ld.steps[r.addr]
		inst := r.addr
		switch {
		case target == nil || target.forEach == nil:
			add(r.addr)
		case r.key != "":
			inst.Key = r.key
			add(inst)
		default:
			for _, k := range target.forEach.keys {
				inst.Key = k
				add(inst)
			}
		}
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].String() < addrs[j].String() })
	return addrs
}

// intern returns addr with strings shared by every reference to the same
// step, not one copy per reference out of the syntax tree.
func (ld *load) intern(addr phases.Address) phases.Address {
	if a, ok := ld.names[addr]; ok {
		return a
	}
	ld.names[addr] = addr
	return addr
}

// validName reports whether name can name a block of the given kind
// ("Invalid <Title> Name" otherwise, with why ends the explanation).
func (ld *load) validName(title, kind, name string, rng hcl.Range, why string) bool {
	if r, first, other, mixed := mixedScripts(name); mixed {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Mixed Scripts in " + title + " Name",
			Detail: fmt.Sprintf("The %s name %q mixes %s and %s letters (%q is %s), so it can look like another name and not be it. Write the name in one script.",
				kind, name, first, other, r, other),
			Subject: rng.Ptr(),
		})
		return false
	}
	if hclsyntax.ValidIdentifier(name) {
		return true
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid " + title + " Name",
		Detail:   fmt.Sprintf("%q cannot be a %s name: a name must start with a letter or underscore and contain only letters, digits, underscores and dashes%s.", name, kind, why),
		Subject:  rng.Ptr(),
	})
	return false
}
