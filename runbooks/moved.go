package runbooks

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/phases"
)

// movedBlock is moved { from = TYPE.NAME  to = TYPE.NAME }.
type movedBlock struct {
	From     hcl.Expression `hcl:"from"`
	To       hcl.Expression `hcl:"to"`
	DefRange hcl.Range      `hcl:",def_range"`
}

// declareMoved checks the moved blocks (Terraform's moved is the model):
// each address written as a reference, parsed by phases.ParseAddress;
// from names no declared step (its step was renamed) and to names one,
// or the from of a later block (a chain a -> b, b -> c, in that order);
// no address is moved from twice, and no chain comes back to where it
// started.
func (ld *load) declareMoved(blocks []*movedBlock) []*phases.Moved {
	var list []*phases.Moved
	fromAt := map[phases.Address]*phases.Moved{}
	for _, b := range blocks {
		from, okFrom := ld.movedAddress(b.From, "from")
		to, okTo := ld.movedAddress(b.To, "to")
		if !okFrom || !okTo {
			continue
		}
		fail := func(subject hcl.Range, summary, detail string) {
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: subject.Ptr()})
		}
		switch {
		case from == to:
			fail(b.To.Range(), "Invalid Move", fmt.Sprintf("This moved block moves %s to itself. Write the step's old address as from and its new one as to.", from))
			continue
		case ld.declared(from):
			fail(b.From.Range(), "Moved From a Declared Step", fmt.Sprintf("A moved block's from must be the old address of a step, but %s is declared in this runbook. Rename the step to the address in to, or remove the moved block.", from))
			continue
		}
		if first, ok := fromAt[from]; ok {
			fail(b.From.Range(), "Duplicate Move", fmt.Sprintf("%s is moved already, to %s at %s. A record moves to one address: remove one of the moved blocks.", from, first.To, first.Range))
			continue
		}
		m := &phases.Moved{From: from, To: to, Range: toRange(b.DefRange)}
		fromAt[from] = m
		list = append(list, m)
	}
	// Every to is a declared step, or the from of a later block; following
	// a chain never comes back.
	valid := list[:0]
	for i, m := range list {
		seen := map[phases.Address]bool{m.From: true}
		end, ok := m.To, true
		for j := i; ok; {
			if seen[end] {
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cyclic Moves",
					Detail:  fmt.Sprintf("The moved blocks carry %s back to itself through %s. Each record moves forward to the step's current address: remove the block that moves it back.", m.From, end),
					Subject: rangePtr(m.Range)})
				ok = false
				break
			}
			seen[end] = true
			next, chained := fromAt[end]
			if !chained {
				break
			}
			k := slices.Index(list, next)
			if k <= j {
				ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Moves Out of Order",
					Detail:  fmt.Sprintf("This block moves %s to %s, which the block at %s moves on, written before it. Write a chain of moves in the order they happened (%s -> %s first).", m.From, end, next.Range, m.From, end),
					Subject: rangePtr(m.Range)})
				ok = false
				break
			}
			j, end = k, next.To
		}
		if !ok {
			continue
		}
		if !ld.declared(end) {
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Moved To an Undeclared Step",
				Detail:  fmt.Sprintf("This block moves %s to %s, but no step or check %s is declared in this runbook. A moved block's to must be the step's new address.%s", m.From, end, end, ld.suggest(end.String(), ld.stepNames)),
				Subject: rangePtr(m.Range)})
			continue
		}
		valid = append(valid, m)
	}
	if len(valid) == 0 {
		return nil
	}
	return valid
}

// movedAddress is the address an attribute of a moved block writes, as
// written (phases.ParseAddress parses it, keys included).
func (ld *load) movedAddress(e hcl.Expression, attr string) (phases.Address, bool) {
	r := e.Range()
	_, diags := hcl.AbsTraversalForExpr(e)
	a, err := phases.ParseAddress(ld.sourceText(r))
	if diags.HasErrors() || err != nil {
		ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid Moved Address",
			Detail:  fmt.Sprintf("A moved block's %s must be a step's address as TYPE.NAME, without quotes, e.g. %s = exec.backup.", attr, attr),
			Subject: r.Ptr()})
		return phases.Address{}, false
	}
	return a, true
}

// sourceText is the text of r as written, trimmed: an address written
// as a reference reads as phases.ParseAddress parses it.
func (ld *load) sourceText(r hcl.Range) string {
	if f := ld.files[r.Filename]; f != nil && r.End.Byte <= len(f.Bytes) {
		return strings.TrimSpace(string(f.Bytes[r.Start.Byte:r.End.Byte]))
	}
	return ""
}

// declared reports whether a names a declared step, or an instance of
// one: a step with for_each has no address without a key.
func (ld *load) declared(a phases.Address) bool {
	d, ok := ld.steps[a.Base()]
	if !ok || d.dup || (a.Key != "") != (d.forEach != nil) {
		return false
	}
	return a.Key == "" || slices.Contains(d.forEach.keys, a.Key)
}

func (ld *load) stepNames() []string {
	var known []string
	for a := range ld.steps {
		known = append(known, a.String())
	}
	sort.Strings(known)
	return known
}

func rangePtr(r phases.Range) *hcl.Range {
	return &hcl.Range{Filename: r.Filename,
		Start: hcl.Pos{Line: r.StartLine, Column: r.StartCol, Byte: r.StartByte},
		End:   hcl.Pos{Line: r.EndLine, Column: r.EndCol, Byte: r.EndByte}}
}
