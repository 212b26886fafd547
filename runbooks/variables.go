package runbooks

import (
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"golang.org/x/text/unicode/norm"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

const envVarPrefix = "MIGRATE_VAR_"

type variableBlock struct {
	Name        string             `hcl:"name,label"`
	NameRange   hcl.Range          `hcl:"name,label_range"`
	Type        *hcl.Attribute     `hcl:"type,optional"`
	Default     *hcl.Attribute     `hcl:"default,optional"`
	Description string             `hcl:"description,optional"`
	Sensitive   bool               `hcl:"sensitive,optional"`
	Validations []*validationBlock `hcl:"validation,block"`
	DefRange    hcl.Range          `hcl:",def_range"`
}

type validationBlock struct {
	Condition    hcl.Expression `hcl:"condition"`
	ErrorMessage hcl.Expression `hcl:"error_message"`
	DefRange     hcl.Range      `hcl:",def_range"`
}

type variable struct {
	block    *variableBlock
	typ      cty.Type
	defaults *typeexpr.Defaults
	value    cty.Value // NilVal until set
	// from says where value came from, for messages; rng is its range
	// when it has one.
	from string
	rng  *hcl.Range
	// encrypted: the value came from an age-encrypted variables file, so
	// it is sensitive whatever the block says.
	encrypted bool
}

func (ld *load) declareVariables(blocks []*variableBlock) {
	for _, b := range blocks {
		if prev, ok := ld.vars[b.Name]; ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Variable",
				Detail:   fmt.Sprintf("A variable named %q was already declared at %s. Variable names must be unique.", b.Name, prev.block.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		if !ld.validName("Variable", "variable", b.Name, b.NameRange, "") {
			continue
		}
		v := &variable{block: b, typ: cty.DynamicPseudoType}
		if b.Type != nil {
			ty, defaults, diags := typeexpr.TypeConstraintWithDefaults(b.Type.Expr)
			ld.diags = append(ld.diags, diags...)
			if !diags.HasErrors() {
				v.typ, v.defaults = ty, defaults
			}
		}
		if b.Default != nil {
			val, diags := b.Default.Expr.Value(nil)
			ld.diags = append(ld.diags, diags...)
			if diags.HasErrors() {
				val = cty.DynamicVal
			}
			ld.setVariable(v, val, "as its default", b.Default.Expr.Range().Ptr())
		}
		ld.vars[b.Name] = v
		ld.varOrder = append(ld.varOrder, v)
	}
}

// setVariable converts a raw value to the variable's type and records it,
// replacing any value from a source of lower precedence.
func (ld *load) setVariable(v *variable, raw cty.Value, from string, rng *hcl.Range) {
	val, err := convertVar(v, raw)
	if err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid Value for Variable",
			Detail: fmt.Sprintf("The value given for variable %q %s is not a %s: %s.",
				v.block.Name, from, typeexpr.TypeString(v.typ), err),
			Subject: rng,
		})
		val = cty.UnknownVal(v.typ)
	}
	v.value, v.from, v.rng, v.encrypted = val, from, rng, false
}

// convertVar converts a raw value to a variable's type, its defaults
// applied to the attributes it leaves out.
func convertVar(v *variable, raw cty.Value) (cty.Value, error) {
	if v.defaults != nil && raw.IsWhollyKnown() && !raw.IsNull() {
		raw = v.defaults.Apply(raw)
	}
	return convert.Convert(raw, v.typ)
}

// assignVariables applies values from the environment, variable files and
// --var options, in increasing precedence, then checks that every variable
// has a value.
func (ld *load) assignVariables() {
	for _, kv := range ld.opts.Environ {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envVarPrefix) {
			continue
		}
		name := norm.NFC.String(strings.TrimPrefix(k, envVarPrefix))
		v, ok := ld.vars[name]
		if !ok {
			continue // like TF_VAR_, values for undeclared variables are ignored
		}
		ld.setFromString(v, val, "in the environment variable "+k, "<value for "+k+">")
	}
	for _, name := range ld.autoVarFiles {
		src, err := fs.ReadFile(ld.fsys, name)
		ld.readVarFile(name, src, err, "found beside the runbook")
	}
	for _, p := range ld.opts.VarFiles {
		src, err := os.ReadFile(p)
		ld.readVarFile(p, src, err, "given with --var-file")
	}
	for _, opt := range ld.opts.Vars {
		name, val, ok := strings.Cut(opt, "=")
		name = norm.NFC.String(strings.TrimSpace(name))
		if !ok || name == "" {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid --var Option",
				Detail:   fmt.Sprintf("The option --var expects NAME=VALUE, as in --var node_ip=10.0.0.50, but got %q.", opt),
			})
			continue
		}
		v, ok := ld.vars[name]
		if !ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Value for Undeclared Variable",
				Detail: fmt.Sprintf("The option --var sets %q, but the runbook declares no such variable.%s Declare it with a variable %q {} block, or remove the option.",
					name, ld.suggest(name, func() []string { return sortedKeys(ld.vars) }), name),
			})
			continue
		}
		ld.setFromString(v, val, "with --var", "<value for var."+name+">")
	}

	var vals = map[string]cty.Value{}
	for _, v := range ld.varOrder {
		if v.value.Type() == cty.NilType && ld.opts.UnsetVarsUnknown {
			v.value = cty.UnknownVal(v.typ)
		} else if v.value.Type() == cty.NilType {
			name := v.block.Name
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Missing Required Variable",
				Detail: fmt.Sprintf("The variable %q has no default value and none was given. Set it with --var %s=VALUE, in a file passed with --var-file, or with the environment variable %s%s; or give it a default.",
					name, name, envVarPrefix, name),
				Subject: v.block.DefRange.Ptr(),
			})
			v.value = cty.UnknownVal(v.typ)
		}
		if v.block.Sensitive || v.encrypted {
			ld.secrets = append(ld.secrets, plainStrings(v.value)...)
			v.value = v.value.Mark(phases.SensitiveMark)
		}
		vals[v.block.Name] = v.value
	}
	ld.scope.vars = cty.ObjectVal(vals)
}

// setFromString sets a variable from a command-line or environment string:
// taken literally for primitive types and for variables of any type,
// parsed as an HCL expression for collections and structures.
func (ld *load) setFromString(v *variable, s, from, filename string) {
	if v.typ.IsPrimitiveType() || v.typ == cty.DynamicPseudoType {
		ld.setVariable(v, cty.StringVal(s), from, nil)
		return
	}
	src := []byte(s)
	if d := notText(src, filename); d != nil {
		ld.diags = append(ld.diags, d)
		v.value, v.from = cty.UnknownVal(v.typ), from
		return
	}
	// A secret's text is never quoted: its errors say what is wrong only.
	secretDiags := func(diags hcl.Diagnostics) hcl.Diagnostics {
		if !v.block.Sensitive || !diags.HasErrors() {
			return diags
		}
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid Value for Variable",
			Detail: fmt.Sprintf("The value given for the sensitive variable %q %s is not a valid %s expression; it is not shown, as it is secret.",
				v.block.Name, from, typeexpr.TypeString(v.typ)),
		}}
	}
	if !v.block.Sensitive {
		ld.files[filename] = &hcl.File{Body: hcl.EmptyBody(), Bytes: src}
	}
	expr, diags := hclsyntax.ParseExpression(src, filename, hcl.InitialPos)
	ld.diags = append(ld.diags, secretDiags(diags)...)
	if diags.HasErrors() {
		v.value, v.from = cty.UnknownVal(v.typ), from
		return
	}
	val, diags := expr.Value(nil)
	ld.diags = append(ld.diags, secretDiags(diags)...)
	if diags.HasErrors() {
		v.value, v.from = cty.UnknownVal(v.typ), from
		return
	}
	ld.setVariable(v, val, from, expr.Range().Ptr())
}

// readVarFile reads NAME = VALUE assignments from a variables file (HCL,
// or JSON when the name ends in .json), given with --var-file or found
// beside the runbook (how says which). An age-encrypted one (named .age,
// or by its content) is decrypted in memory: its values are sensitive, and
// its diagnostics name the file and line but never quote it.
func (ld *load) readVarFile(p string, src []byte, err error, how string) {
	src, encrypted, ok := ld.openVarFile(p, src, err, how)
	if ok {
		ld.assignVarFile(p, src, encrypted)
	}
}

// openVarFile returns the text of a variables file, decrypted when it is
// age-encrypted; not ok (and reported) when it cannot be read.
func (ld *load) openVarFile(p string, src []byte, err error, how string) (_ []byte, encrypted, ok bool) {
	if err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Cannot Read Variables File",
			Detail:   fmt.Sprintf("The file %s %s cannot be read: %s.", p, how, err),
		})
		return nil, false, false
	}
	encrypted = agefile.IsEncrypted(src)
	if !encrypted && strings.HasSuffix(p, agefile.Ext) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Variables File Not Encrypted",
			Detail:   fmt.Sprintf("The file %s %s is named %s but is not age-encrypted, so it is not read: encrypt it with migrate secrets encrypt, or rename it.", p, how, agefile.Ext),
		})
		return nil, false, false
	}
	if encrypted {
		if src, err = ld.decrypt(src); err != nil {
			// validate, graph and status need no values: without the
			// identity (in CI) the file's variables stay unknown.
			sev := hcl.DiagError
			if ld.opts.UnsetVarsUnknown {
				sev = hcl.DiagWarning
			}
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: sev,
				Summary:  "Cannot Decrypt Variables File",
				Detail:   fmt.Sprintf("The file %s %s is age-encrypted and cannot be decrypted: %s. Set %s or --age-identity to an identity among its recipients.", p, how, err, agefile.IdentityEnv),
			})
			return nil, false, false
		}
	}
	return src, encrypted, true
}

// assignVarFile parses a variables file and sets the variables it assigns;
// the diagnostics of an encrypted one never quote it.
func (ld *load) assignVarFile(p string, src []byte, encrypted bool) {
	var diags hcl.Diagnostics
	add := func(ds hcl.Diagnostics) {
		if encrypted {
			ds = hideEncrypted(ds)
		}
		diags = append(diags, ds...)
	}
	defer func() { ld.diags = append(ld.diags, diags...) }()
	if d := notText(src, p); d != nil {
		add(hcl.Diagnostics{d})
		return
	}
	var f *hcl.File
	var ds hcl.Diagnostics
	if strings.HasSuffix(strings.TrimSuffix(p, agefile.Ext), ".json") {
		f, ds = hcljson.Parse(src, p)
	} else {
		f, ds = hclsyntax.ParseConfig(src, p, hcl.InitialPos)
	}
	add(ds)
	if f == nil || f.Body == nil {
		return
	}
	if !encrypted { // an encrypted file's bytes are kept from the view's snippets
		ld.files[p] = f
	}
	attrs, ds := f.Body.JustAttributes()
	add(ds)
	list := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Range.Start.Byte < list[j].Range.Start.Byte })
	for _, a := range list {
		v, ok := ld.vars[norm.NFC.String(a.Name)]
		if !ok {
			add(hcl.Diagnostics{{
				Severity: hcl.DiagWarning,
				Summary:  "Value for Undeclared Variable",
				Detail: fmt.Sprintf("The file sets %q, but the runbook declares no such variable, so the value is ignored.%s",
					a.Name, ld.suggest(a.Name, func() []string { return sortedKeys(ld.vars) })),
				Subject: a.NameRange.Ptr(),
			}})
			continue
		}
		val, ds := a.Expr.Value(nil)
		add(ds)
		if ds.HasErrors() {
			continue
		}
		n := len(ld.diags)
		ld.setVariable(v, val, "in "+p, a.Expr.Range().Ptr())
		if encrypted {
			ld.diags = append(ld.diags[:n], hideEncrypted(ld.diags[n:])...)
			v.encrypted = true
		}
	}
}

// decrypt opens an age-encrypted variables file with the identity of
// Options.Identities.
func (ld *load) decrypt(src []byte) ([]byte, error) {
	load := ld.opts.Identities
	if load == nil {
		load = func() ([]age.Identity, error) { return agefile.Identities("") }
	}
	ids, err := load()
	if err != nil {
		return nil, err
	}
	return agefile.Decrypt(src, ids...)
}

// encryptedDetail replaces the details of problems in an encrypted file
// that could quote its clear content.
const encryptedDetail = "The file is age-encrypted, so its content is not shown here. Correct it with: migrate secrets edit FILE."

// hideEncrypted keeps the summary and place of diagnostics about an
// encrypted file and drops what could quote it: the parser's details name
// tokens, not values, and stay; the others are replaced.
func hideEncrypted(diags hcl.Diagnostics) hcl.Diagnostics {
	out := make(hcl.Diagnostics, 0, len(diags))
	for _, d := range diags {
		c := *d
		c.Expression, c.EvalContext = nil, nil
		if d.Expression != nil || d.EvalContext != nil || strings.Contains(d.Detail, `"`) {
			c.Detail = encryptedDetail
		}
		out = append(out, &c)
	}
	return out
}

// validateVariables runs every validation block of every variable whose
// value is known.
func (ld *load) validateVariables() {
	for _, v := range ld.varOrder {
		for _, vb := range v.block.Validations {
			ld.validate(v, vb)
		}
	}
}

func (ld *load) validate(v *variable, vb *validationBlock) {
	var trs []hcl.Traversal
	trs = append(trs, vb.Condition.Variables()...)
	trs = append(trs, vb.ErrorMessage.Variables()...)
	_, bad, diags := ld.checkRefs(trs, false, "A variable validation")
	ld.diags = append(ld.diags, diags...)
	if len(bad) > 0 || !v.value.IsWhollyKnown() {
		return
	}
	ctx := ld.scope.evalContext(nil, nil, nil)
	cond, diags := vb.Condition.Value(ctx)
	ld.diags = append(ld.diags, hideSensitive(diags, ctx, vb.Condition)...)
	if diags.HasErrors() {
		return
	}
	cond, _ = cond.Unmark()
	if !cond.IsKnown() {
		return
	}
	if cond.IsNull() || cond.Type() != cty.Bool {
		c, err := convert.Convert(cond, cty.Bool)
		if err != nil || c.IsNull() {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid Validation Condition",
				Detail:   "The condition of a validation must be true or false.",
				Subject:  vb.Condition.Range().Ptr(),
			})
			return
		}
		cond = c
	}
	if cond.True() {
		return
	}
	msg := "The value does not pass the validation rule."
	mv, diags := vb.ErrorMessage.Value(ctx)
	ld.diags = append(ld.diags, hideSensitive(diags, ctx, vb.ErrorMessage)...)
	if !diags.HasErrors() {
		if mv.IsMarked() {
			msg = "The value does not pass the validation rule; its error message is not shown because it would reveal a sensitive value."
		} else if s, err := convert.Convert(mv, cty.String); err == nil && s.IsKnown() && !s.IsNull() {
			msg = s.AsString()
		}
	}
	subject := v.rng
	if subject == nil {
		subject = vb.Condition.Range().Ptr()
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid Value for Variable",
		Detail: fmt.Sprintf("%s\n\nThe value of variable %q was given %s and checked by the validation rule at %s.",
			msg, v.block.Name, v.from, vb.DefRange),
		Subject: subject,
	})
}

type localValue struct {
	attr  *hcl.Attribute
	value cty.Value
	state int // 0 new, 1 evaluating, 2 done
}

// evalLocals evaluates every local value in dependency order, reporting
// cycles with all their members.
func (ld *load) evalLocals(blocks []*localsBlock) {
	var order []*localValue
	for _, b := range blocks {
		attrs := make([]*hcl.Attribute, 0, len(b.Attrs))
		for _, a := range b.Attrs {
			attrs = append(attrs, a)
		}
		sort.Slice(attrs, func(i, j int) bool { return attrs[i].Range.Start.Byte < attrs[j].Range.Start.Byte })
		for _, a := range attrs {
			if prev, ok := ld.locals[a.Name]; ok {
				ld.diags = append(ld.diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate Local Value",
					Detail:   fmt.Sprintf("A local value named %q was already defined at %s. Local value names must be unique across all locals blocks.", a.Name, prev.attr.NameRange),
					Subject:  a.NameRange.Ptr(),
				})
				continue
			}
			lv := &localValue{attr: a}
			ld.locals[a.Name] = lv
			order = append(order, lv)
		}
	}
	for _, lv := range order {
		ld.evalLocal(lv, nil, lv.attr.NameRange)
	}
	ld.scope.locals = ld.localsObject()
}

func (ld *load) localsObject() cty.Value {
	m := make(map[string]cty.Value, len(ld.locals))
	for name, lv := range ld.locals {
		if lv.state == 2 {
			m[name] = lv.value
		} else {
			m[name] = cty.DynamicVal
		}
	}
	return cty.ObjectVal(m)
}

// evalLocal evaluates lv after the locals it refers to; from is the
// reference that led here, the subject of a cycle.
func (ld *load) evalLocal(lv *localValue, stack []*localValue, from hcl.Range) {
	switch lv.state {
	case 2:
		return
	case 1:
		// A cycle: from lv's place in the stack to the end.
		start := 0
		for i, s := range stack {
			if s == lv {
				start = i
			}
		}
		var names []string
		for _, s := range stack[start:] {
			names = append(names, "local."+s.attr.Name)
		}
		path := strings.Join(append(names, "local."+lv.attr.Name), " -> ")
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Dependency Cycle",
			Detail:   fmt.Sprintf("The local values %s refer to each other in a cycle: %s. Remove one of the references to break it.", englishList(names), path),
			Subject:  from.Ptr(),
		})
		for _, s := range stack[start:] {
			s.value, s.state = cty.DynamicVal, 2
		}
		return
	}
	lv.state = 1
	stack = append(stack, lv)
	trs := lv.attr.Expr.Variables()
	_, bad, diags := ld.checkRefs(trs, false, "A local value")
	ld.diags = append(ld.diags, diags...)
	for _, tr := range trs {
		if tr.RootName() != "local" || len(tr) < 2 {
			continue
		}
		if name, ok := traverserName(tr[1]); ok {
			if dep, ok := ld.locals[name]; ok {
				ld.evalLocal(dep, stack, tr.SourceRange())
			}
		}
	}
	if lv.state == 2 { // resolved as part of a cycle
		return
	}
	ctx := ld.scope.evalContext(nil, nil, nil)
	ctx.Variables["local"] = ld.localsObject()
	val, diags := lv.attr.Expr.Value(ctx)
	ld.diags = append(ld.diags, hideSensitive(dropWithin(diags, bad), ctx, lv.attr.Expr)...)
	if diags.HasErrors() {
		val = cty.DynamicVal
	}
	lv.value, lv.state = val, 2
	ld.order = append(ld.order, lv)
}

// plainStrings lists the known string leaves of v (numbers and bools in
// their string form), so that the engine can redact a sensitive
// variable's value wherever it turns up inside other text.
func plainStrings(v cty.Value) []string {
	var out []string
	cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		x, _ = x.UnmarkDeep()
		if !x.IsKnown() || x.IsNull() {
			return false, nil
		}
		switch x.Type() {
		case cty.String:
			out = append(out, x.AsString())
		case cty.Number:
			out = append(out, x.AsBigFloat().Text('f', -1))
		}
		return true, nil
	})
	return out
}
