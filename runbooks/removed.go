package runbooks

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// removedBlock is removed { from = TYPE.NAME  revert = BOOL }.
type removedBlock struct {
	From     hcl.Expression `hcl:"from"`
	Revert   hcl.Expression `hcl:"revert"`
	DefRange hcl.Range      `hcl:",def_range"`
}

// declareRemoved checks the removed blocks (Terraform's removed is the
// model): from is a step's address, or a group call's (group.NAME,
// group.NAME["KEY"]: all its steps), that the runbook no longer
// declares; revert a literal true or false; no address named twice, nor
// also moved from (a record is carried or let go, not both).
func (ld *load) declareRemoved(blocks []*removedBlock, moved []*phases.Moved) []*phases.Removed {
	var list []*phases.Removed
	fail := func(subject hcl.Range, summary, detail string) {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: subject.Ptr()})
	}
	seen := map[string]*phases.Removed{}
	for _, b := range blocks {
		r, ok := ld.removedTarget(b.From)
		if !ok {
			continue
		}
		v, diags := b.Revert.Value(nil)
		if diags.HasErrors() || v.Type() != cty.Bool || v.IsNull() {
			fail(b.Revert.Range(), "Invalid Removed Block",
				"A removed block's revert is true or false, written as it is: false lets the records go and leaves what their steps did as it is; true undoes them, as deleting the step alone does.")
			continue
		}
		r.Revert, r.Range = v.True(), toRange(b.DefRange)
		target := r.Target()
		switch {
		case !r.Call && (ld.declared(r.From) || r.From.Key == "" && ld.steps[r.From] != nil):
			fail(b.From.Range(), "Removed Step Still Declared",
				fmt.Sprintf("A removed block is about a step the runbook no longer has, but %s is declared in it. Delete the step's block, or this removed block.", target))
			continue
		case r.Call && ld.callDeclared(r.From):
			fail(b.From.Range(), "Removed Group Call Still Declared",
				fmt.Sprintf("A removed block is about a group call the runbook no longer has, but %s is called by a phase. Delete the call, or this removed block.", target))
			continue
		}
		if first, ok := seen[target]; ok {
			fail(b.From.Range(), "Duplicate Removed Block", fmt.Sprintf("%s is named already by the removed block at %s: keep one.", target, first.Range))
			continue
		}
		if i := slices.IndexFunc(moved, func(m *phases.Moved) bool { return r.Matches(m.From) }); i >= 0 {
			fail(b.From.Range(), "Removed and Moved",
				fmt.Sprintf("The moved block at %s carries the record of %s to %s: a record is carried or let go, not both. Keep one of the blocks.", moved[i].Range, moved[i].From, moved[i].To))
			continue
		}
		seen[target] = r
		list = append(list, r)
	}
	return list
}

// removedTarget is what a removed block's from names: a step's address,
// or a group call's.
func (ld *load) removedTarget(e hcl.Expression) (*phases.Removed, bool) {
	r := e.Range()
	text := ld.sourceText(r)
	_, diags := hcl.AbsTraversalForExpr(e)
	if !diags.HasErrors() {
		if a, err := phases.ParseAddress(text); err == nil {
			return &phases.Removed{From: a}, true
		}
		// A group call: group.NAME or group.NAME["KEY"], parsed as the
		// prefix of a step's address.
		if a, err := phases.ParseAddress(text + ".t.n"); err == nil && strings.HasPrefix(text, "group.") {
			return &phases.Removed{From: phases.Address{Group: a.Group, GroupKey: a.GroupKey}, Call: true}, true
		}
	}
	ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Removed Address",
		Detail:  "A removed block's from is a step's address as TYPE.NAME (group.CALL.TYPE.NAME in a group, TYPE.NAME[\"KEY\"] for an instance), or a group call's as group.NAME (group.NAME[\"KEY\"] for one instance), without quotes, e.g. from = exec.backup.",
		Subject: r.Ptr()})
	return nil, false
}

// callDeclared reports whether a phase calls the group a's prefix names
// (with its key, when it has one).
func (ld *load) callDeclared(a phases.Address) bool {
	gc, ok := ld.groups[a.Group]
	return ok && (a.GroupKey == "" || slices.Contains(gc.keys, a.GroupKey))
}
