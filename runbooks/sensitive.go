package runbooks

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// sensitiveDetail replaces the detail of an error raised by an expression
// that depends on a sensitive value. HCL's details quote values ("cannot
// convert "Q4zXw9KpL2m" to number") and its diagnostics carry the values
// of the expression's variables ("with s as "cnry""): pieces of a secret a
// scrubber cannot recognise. Terraform hides them the same way.
const sensitiveDetail = "The expression depends on a sensitive value, so the details of this error are not shown: they could reveal the value. " +
	"Check what the expression does with the value (the functions it calls and the form they expect) without printing it."

// hideSensitive rewrites the diagnostics of evaluating exprs in ctx: those
// that point into an expression depending on a sensitive value lose their
// detail, expression and evaluation context.
func hideSensitive(diags hcl.Diagnostics, ctx *hcl.EvalContext, exprs ...hcl.Expression) hcl.Diagnostics {
	if len(diags) == 0 || ctx == nil {
		return diags
	}
	var secret []hcl.Range
	for _, e := range exprs {
		if e != nil && dependsOnSensitive(e, ctx) {
			secret = append(secret, e.Range())
		}
	}
	if len(secret) == 0 {
		return diags
	}
	return hide(diags, func(r hcl.Range) bool { return within(r, secret) })
}

// hideSensitiveBody is hideSensitive for the attributes of a body. In a
// body of another syntax than HCL's own, whose expressions cannot be
// listed, every diagnostic is hidden when any variable the spec reads is
// sensitive.
func hideSensitiveBody(diags hcl.Diagnostics, ctx *hcl.EvalContext, body hcl.Body, spec hcldec.Spec) hcl.Diagnostics {
	if len(diags) == 0 || ctx == nil {
		return diags
	}
	if exprs, ok := bodyExprs(body); ok {
		return hideSensitive(diags, ctx, exprs...)
	}
	for _, tr := range hcldec.Variables(body, spec) {
		if traversesSensitive(tr, ctx) {
			return hide(diags, func(hcl.Range) bool { return true })
		}
	}
	return diags
}

// hide rewrites the diagnostics whose subject is secret. Identical ones
// left (one per element of a secret split apart) are reported once.
func hide(diags hcl.Diagnostics, secret func(hcl.Range) bool) hcl.Diagnostics {
	out := diags[:0:0]
	seen := map[string]bool{}
	for _, d := range diags {
		if d.Subject == nil || !secret(*d.Subject) {
			out = append(out, d)
			continue
		}
		key := fmt.Sprint(d.Severity, d.Summary, "\x00", d.Subject.String())
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, &hcl.Diagnostic{Severity: d.Severity, Summary: d.Summary, Detail: sensitiveDetail, Subject: d.Subject, Context: d.Context})
	}
	return out
}

// bodyExprs lists the attribute expressions of a body and its nested
// blocks. A body that is not HCL native syntax gives nil and ok false.
func bodyExprs(body hcl.Body) (exprs []hcl.Expression, ok bool) {
	b, ok := body.(*hclsyntax.Body)
	if !ok {
		return nil, false
	}
	for _, a := range b.Attributes {
		exprs = append(exprs, a.Expr)
	}
	for _, blk := range b.Blocks {
		more, _ := bodyExprs(blk.Body)
		exprs = append(exprs, more...)
	}
	return exprs, true
}

// dependsOnSensitive reports whether a variable of expr (var.x, local.y,
// a step's outputs) holds a value marked sensitive in ctx.
func dependsOnSensitive(expr hcl.Expression, ctx *hcl.EvalContext) bool {
	for _, tr := range expr.Variables() {
		if traversesSensitive(tr, ctx) {
			return true
		}
	}
	return false
}

// traversesSensitive reports whether the value tr leads to, or as much of
// it as can be followed, holds a sensitive value. A traversal that fails
// at its second step (var.undeclared) holds nothing: walking all of var
// instead would cost, for every such mistake, a walk of every variable.
func traversesSensitive(tr hcl.Traversal, ctx *hcl.EvalContext) bool {
	for n := len(tr); n >= min(len(tr), 2); n-- {
		v, diags := tr[:n].TraverseAbs(ctx)
		if !diags.HasErrors() {
			return containsSensitive(v)
		}
	}
	return false
}

func containsSensitive(v cty.Value) bool {
	found := false
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if x.HasMark(phases.SensitiveMark) {
			found = true
		}
		return !found, nil
	})
	return found
}
