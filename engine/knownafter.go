package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

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

// knownAfterText is how a plan shows a value that waits for the steps of
// after: "(known after exec.first)".
func knownAfterText(after []phases.Address) string {
	return "(known after " + joinAddrs(after) + ")"
}

// nameKnownAfter rewrites a provider's diff so that each value it could
// not know names the steps it waits for.
func nameKnownAfter(diff string, after []phases.Address) string {
	if len(after) == 0 {
		return diff
	}
	return strings.ReplaceAll(diff, phases.UnknownText, knownAfterText(after))
}

// wholeDiffDeferred reports whether a provider deferred its whole diff
// ("(known after apply): attrs", as providers/sdk writes it for a step
// type that cannot plan with unknown values).
func wholeDiffDeferred(diff string) bool {
	return strings.HasPrefix(diff, phases.UnknownText+": ")
}

// deferredDiff is the diff of a step whose provider could not plan it
// before the steps it waits for have run.
func deferredDiff(after []phases.Address) string {
	return fmt.Sprintf("diff deferred until %s %s run", joinAddrs(after), plural(len(after), "has", "have"))
}
