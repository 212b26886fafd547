package runbooks

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"

	"github.com/homelab-migrate/migrate/phases"
)

// providerDecl is a provider block checked against its provider's schema.
type providerDecl struct {
	block *providerBlock
	attrs map[string]phases.Attribute
	cfg   *phases.ProviderConfig
	// refs are the steps the block uses: dependencies of every step the
	// provider runs.
	refs []stepRef
}

// declareProviders checks every provider block against its schema.
func (ld *load) declareProviders(blocks []*providerBlock) {
	for _, b := range blocks {
		schema, ok := ld.opts.Schemas[b.Type]
		if !ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unknown Provider Type",
				Detail: fmt.Sprintf("There is no provider of type %q.%s The provider types are %s.",
					b.Type, didYouMean(b.Type, sortedKeys(ld.opts.Schemas)), englishList(sortedKeys(ld.opts.Schemas))),
				Subject: b.TypeRange.Ptr(),
			})
			continue
		}
		if !ld.validName("Provider", "provider", b.Name, b.NameRange, "") {
			continue
		}
		key := b.Type + "." + b.Name
		if prev, ok := ld.providers[key]; ok {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Provider Configuration",
				Detail:   fmt.Sprintf("A provider %q %q was already configured at %s. Give each configuration of a provider type its own name.", b.Type, b.Name, prev.block.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		d := &providerDecl{block: b, attrs: schema.Provider.Attributes, cfg: &phases.ProviderConfig{
			Type: b.Type, Name: b.Name, Range: toRange(b.DefRange),
		}}
		ld.providers[key] = d
		ld.providerOrder = append(ld.providerOrder, d)
	}
}

// resolveProviders, once every step is declared, checks the references
// of each provider block (which may use step outputs: the provider is
// configured when first used, after those steps ran) and decodes it once
// with unknown outputs to report mistakes.
func (ld *load) resolveProviders() {
	for _, d := range ld.providerOrder {
		spec := ld.spec("provider:"+d.block.Type, d.attrs)
		refs, bad, diags := ld.checkRefs(hcldec.Variables(d.block.Config, spec), true, "")
		ld.diags = append(ld.diags, diags...)
		d.refs = ld.expandRefs(refs)
		er := ld.evalRefs(refs)
		ev := &evaluator{scope: ld.scope, body: d.block.Config, spec: spec, refs: er.steps, outs: er.outs, sensitive: sensitiveNames(d.attrs)}
		_, diags = ev.decode(nil)
		ld.diags = append(ld.diags, dropWithin(diags, bad)...)
		d.cfg.Config = ev
		d.cfg.DependsOn = ld.uniqueAddrs(d.refs)
	}
}

// resolveProvider finds the provider configuration that runs a step.
func (ld *load) resolveProvider(d *stepDecl) {
	pt := d.info.provider
	var blocks []*providerDecl
	for _, p := range ld.providerOrder {
		if p.block.Type == pt {
			blocks = append(blocks, p)
		}
	}
	schema := ld.opts.Schemas[pt]
	implicitOK := true
	for _, a := range schema.Provider.Attributes {
		if a.Required {
			implicitOK = false
		}
	}

	if e, ok := d.inst.provider(pt); ok && d.provider == nil {
		d.provider = &hcl.Attribute{Name: "provider", Expr: e, Range: e.Range(), NameRange: e.Range()}
	}
	if d.provider != nil {
		ld.namedProvider(d, blocks, implicitOK)
		return
	}
	ld.defaultProvider(d, blocks, implicitOK)
}

// namedProvider resolves the provider argument of d, TYPE.NAME, among the
// provider blocks of its type.
func (ld *load) namedProvider(d *stepDecl, blocks []*providerDecl, implicitOK bool) {
	pt := d.info.provider
	tr, diags := hcl.AbsTraversalForExpr(d.provider.Expr)
	if diags.HasErrors() || len(tr) != 2 {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid Provider Reference",
			Detail:   fmt.Sprintf("The provider argument names a provider configuration as TYPE.NAME, without quotes, as in provider = %s.NAME.", pt),
			Subject:  d.provider.Expr.Range().Ptr(),
		})
		return
	}
	name, _ := traverserName(tr[1])
	if tr.RootName() != pt {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid Provider Reference",
			Detail:   fmt.Sprintf("Steps of type %s are run by a provider of type %q, not %q.", d.block.Type, pt, tr.RootName()),
			Subject:  d.provider.Expr.Range().Ptr(),
		})
		return
	}
	if p, ok := ld.providers[pt+"."+name]; ok {
		d.step.Provider, d.prov = p.cfg.Key(), p
		return
	}
	if name == implicitName && len(blocks) == 0 && implicitOK {
		d.step.Provider = ld.implicitProvider(pt).Key()
		return
	}
	var known []string
	for _, p := range blocks {
		known = append(known, p.block.Name)
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Reference to Undeclared Provider",
		Detail:   fmt.Sprintf("There is no provider %q %q block.%s Declare it, or refer to one that exists.", pt, name, didYouMean(name, known)),
		Subject:  d.provider.Expr.Range().Ptr(),
	})
}

// defaultProvider picks the provider of a step without a provider
// argument: the one block of its type, the one named after the implicit
// name, or an implicit configuration when the provider needs no settings.
// Two blocks or more, none named so, are an error at the step naming them
// all; none, when the provider requires settings, is an error too.
func (ld *load) defaultProvider(d *stepDecl, blocks []*providerDecl, implicitOK bool) {
	pt := d.info.provider
	switch {
	case len(blocks) == 1:
		d.step.Provider, d.prov = blocks[0].cfg.Key(), blocks[0]
	case len(blocks) > 1:
		for _, p := range blocks {
			if p.block.Name == implicitName {
				d.step.Provider, d.prov = p.cfg.Key(), p
				return
			}
		}
		var keys, where []string
		for _, p := range blocks {
			keys = append(keys, p.cfg.Key())
			where = append(where, fmt.Sprintf("%s (%s)", p.cfg.Key(), lineOf(p.block.DefRange)))
		}
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Ambiguous Provider",
			Detail: fmt.Sprintf("The %s %s does not say which %q provider runs it, and the runbook configures %d: %s. Add provider = %s (or the name of another) to the %s; a step without it takes the only block of its type, or the one named %q.",
				d.kind(), d.addr(), pt, len(blocks), englishList(where), keys[0], d.kind(), implicitName),
			Subject: d.block.DefRange.Ptr(),
		})
	case implicitOK:
		d.step.Provider = ld.implicitProvider(pt).Key()
	default:
		var req []string
		attrs := ld.opts.Schemas[pt].Provider.Attributes
		for _, name := range sortedKeys(attrs) {
			if attrs[name].Required {
				req = append(req, name)
			}
		}
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing Provider Configuration",
			Detail: fmt.Sprintf("Steps of type %s are run by the %q provider, which needs a configuration block because it requires %s: add provider %q \"NAME\" { ... }.",
				d.block.Type, pt, englishList(req), pt),
			Subject: d.block.DefRange.Ptr(),
		})
	}
}

// implicitProvider is the configuration of a provider type used without a
// block ("local" needs none).
func (ld *load) implicitProvider(pt string) *phases.ProviderConfig {
	if p, ok := ld.implicit[pt]; ok {
		return p
	}
	attrs := ld.opts.Schemas[pt].Provider.Attributes
	p := &phases.ProviderConfig{
		Type: pt,
		Name: implicitName,
		Config: &evaluator{
			scope: ld.scope, body: hcl.EmptyBody(), spec: ld.spec("provider:"+pt, attrs),
			sensitive: sensitiveNames(attrs),
		},
	}
	ld.implicit[pt] = p
	return p
}
