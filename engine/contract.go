package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// A saved plan is a contract: run --plan runs exactly the steps that were
// reviewed, with the inputs they were reviewed with. Each step's entry
// keeps a digest of its attributes as written (a value that waits for
// another step counts as "known after" that step, so the digest does not
// depend on what the state or a provider says of it) and one of the files
// its provider reads for it. Both are computed before any provider is
// asked to plan, from the same things at plan and at run, and run --plan
// compares every step of the plan's phases before the first one runs.

// Contract is what a saved plan holds of a step's inputs.
type Contract struct {
	// Attrs digests the step's attributes as written.
	Attrs string `json:"attrs"`
	// Files digests the files its provider reads for it (a chart, values
	// files, patches, a script, copy sources), empty when it reads none
	// or they cannot be named before earlier steps run.
	Files string `json:"files,omitempty"`
	// Resolved says what its provider resolved that the runbook does not
	// pin (a remote chart's version), as the provider said it.
	Resolved string `json:"resolved,omitempty"`
	// unreadable is why its files could not be digested, for the
	// refusal's words.
	unreadable string
}

// ContractError lists every way the runbook differs from a saved plan.
type ContractError struct {
	Differences []string
}

func (e *ContractError) Error() string {
	return fmt.Sprintf("the runbook no longer matches the plan, which was reviewed as it was:\n  - %s\nnothing was run: make a new plan (migrate plan --out FILE) and review it",
		strings.Join(e.Differences, "\n  - "))
}

// contracts digests the inputs of every step and check of the phases,
// against snap, the state the plan pins. It runs before any step is
// planned: a provider configured from step outputs is then configured in
// neither plan nor run, and its files are left to the check each step
// gets at its turn.
func (e *Engine) contracts(ctx context.Context, list []*phases.Phase, snap *state.Snapshot) map[phases.Address]Contract {
	unknown := make(map[phases.Address]cty.Value, len(e.steps))
	for a := range e.steps {
		unknown[a] = unknownUntil(a)
	}
	recorded := e.loadOutputs(snap)
	out := map[phases.Address]Contract{}
	for _, ph := range list {
		for _, s := range slices.Concat(ph.Steps, ph.Checks) {
			c := e.contractOf(s, unknown)
			e.contractFiles(ctx, s, recorded, &c)
			out[s.Addr] = c
		}
	}
	return out
}

// contractOf digests a step's attributes as written.
func (e *Engine) contractOf(s *phases.Step, unknown map[phases.Address]cty.Value) Contract {
	v, diags := s.Config.Evaluate(unknown)
	h := e.keyedHash()
	fmt.Fprintf(h, "%s\x00", s.Provider)
	if diags.HasErrors() {
		fmt.Fprintf(h, "invalid: %s", diags.Err())
		return Contract{Attrs: hex.EncodeToString(h.Sum(nil))}
	}
	e.writeShape(h, v)
	return Contract{Attrs: hex.EncodeToString(h.Sum(nil))}
}

// contractFiles digests the files a step's provider reads for it. Its
// attributes are evaluated with the outputs the pinned state records
// (the same at plan and at run), so that a patch of a machine config
// whose node address comes from an earlier step is compared too; when
// they wait for a step that has not run, the files are left to the
// step's turn.
func (e *Engine) contractFiles(ctx context.Context, s *phases.Step, recorded *outputs, c *Contract) {
	if e.lazy[s.Provider] != nil {
		return
	}
	d, ok := e.provider(s).(providers.InputDigester)
	if !ok {
		return
	}
	cfg, _, diags := recorded.evaluateAfter(s)
	if diags.HasErrors() || !cfg.IsWhollyKnown() {
		return
	}
	resp := d.InputDigest(ctx, providers.DigestRequest{Type: s.Addr.Type, Addr: s.Addr, Config: cfg})
	switch {
	case resp.Diagnostics.HasErrors():
		// Said the same way twice, an error is no difference; its
		// provider's plan says what is wrong.
		c.unreadable = e.redactDiags(resp.Diagnostics).Err().Error()
		c.Files = e.keyed("unreadable: " + c.unreadable)
	case resp.Digest != "":
		c.Files = e.keyed(resp.Digest)
		c.Resolved = e.hooks.redactor.Text(resp.Resolved)
	}
}

// writeShape writes v to h, every value that is not known yet as the
// steps it waits for, a sensitive value only through the state's key.
func (e *Engine) writeShape(h hash.Hash, v cty.Value) {
	v, marks := v.Unmark()
	if _, ok := marks[phases.SensitiveMark]; ok {
		if len(e.inputKey) == 0 {
			fmt.Fprint(h, "sensitive;") // nothing of it without a key
			return
		}
		sub := sha256.New()
		e.writeShape(sub, v)
		fmt.Fprintf(h, "sensitive(%s);", e.keyed(hex.EncodeToString(sub.Sum(nil))))
		return
	}
	switch {
	case !v.IsKnown():
		var after []string
		for m := range marks {
			if a, ok := m.(knownAfter); ok {
				after = append(after, phases.Address(a).String())
			}
		}
		slices.Sort(after)
		fmt.Fprintf(h, "unknown(%s);", strings.Join(after, ","))
	case v.IsNull():
		fmt.Fprint(h, "null;")
	case v.Type() == cty.String:
		fmt.Fprintf(h, "%q;", v.AsString())
	case v.Type() == cty.Number:
		fmt.Fprintf(h, "%s;", v.AsBigFloat().Text('g', -1))
	case v.Type() == cty.Bool:
		fmt.Fprintf(h, "%t;", v.True())
	case v.CanIterateElements():
		fmt.Fprint(h, "{")
		for it := v.ElementIterator(); it.Next(); {
			k, x := it.Element()
			e.writeShape(h, k)
			e.writeShape(h, x)
		}
		fmt.Fprint(h, "}")
	default:
		fmt.Fprintf(h, "%s;", v.Type().FriendlyName())
	}
}

// checkContract compares the runbook with what the saved plan was made
// of, and names every difference: a step added to a planned phase, one
// removed, one whose attributes or files changed, other moves. A plan that keeps no
// planned values for a step run plans again is refused first (oldPlan).
func (e *Engine) checkContract(ctx context.Context, plan *Plan, snap *state.Snapshot) error {
	if err := oldPlan(plan); err != nil {
		return err
	}
	var list []*phases.Phase
	for _, pp := range plan.Phases {
		if ph := e.runbook.Phase(pp.Name); ph != nil {
			list = append(list, ph)
		}
	}
	snap, moves, _ := e.moves(snap)
	now := e.contracts(ctx, list, snap)
	var diffs []string
	if !slices.Equal(moves, plan.Moved) {
		diffs = append(diffs, fmt.Sprintf("the runbook's moved blocks now move %s, the plan moved %s", movesText(moves), movesText(plan.Moved)))
	}
	if letGo := e.forgets(snap); !slices.Equal(letGo, plan.LetGo) {
		diffs = append(diffs, fmt.Sprintf("the runbook's removed blocks now let go of %s, the plan let go of %s", forgetsText(letGo), forgetsText(plan.LetGo)))
	}
	for _, pp := range plan.Phases {
		ph := e.runbook.Phase(pp.Name)
		if ph == nil {
			continue // check refuses it
		}
		planned := map[phases.Address]bool{}
		for _, sp := range pp.Steps {
			planned[sp.Addr] = true
			c, ok := now[sp.Addr]
			switch {
			case !ok && sp.Action == providers.Revert && removedReason(sp.ReasonCode):
				// An instance whose key left the map, or a step of a group
				// call instance gone: reverted, not run.
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s is in the plan but no longer in phase %s of the runbook", sp.Addr, pp.Name))
			case c.Attrs != sp.Contract.Attrs:
				diffs = append(diffs, fmt.Sprintf("%s: its attributes changed since the plan was made", sp.Addr))
			case c.Files != sp.Contract.Files && c.unreadable != "":
				diffs = append(diffs, fmt.Sprintf("%s: the files it reads cannot be read now to compare them with the plan's: %s", sp.Addr, c.unreadable))
			case c.Files != sp.Contract.Files && c.Resolved != sp.Contract.Resolved:
				diffs = append(diffs, fmt.Sprintf("%s: %s when the plan was made, but %s now", sp.Addr, orNothing(sp.Contract.Resolved), orNothing(c.Resolved)))
			case c.Files != sp.Contract.Files:
				diffs = append(diffs, fmt.Sprintf("%s: a file it reads changed since the plan was made (a chart, a values file, a patch, a script or a copy source), or a remote chart now resolves to another version", sp.Addr))
			}
		}
		for _, s := range slices.Concat(ph.Steps, ph.Checks) {
			if !planned[s.Addr] {
				diffs = append(diffs, fmt.Sprintf("%s was added to phase %s since the plan was made: it was never reviewed", s.Addr, pp.Name))
			}
		}
	}
	if len(diffs) > 0 {
		return &ContractError{Differences: diffs}
	}
	return nil
}

// orNothing is a Resolved as said in a refusal.
func orNothing(resolved string) string {
	if resolved == "" {
		return "nothing was resolved"
	}
	return resolved
}

// CheckSavedPlan refuses a saved plan whose runbook changed since it was
// made (see ContractError). The CLI calls it before it takes the state's
// lock; Run calls it again for a saved plan not checked so.
func (e *Engine) CheckSavedPlan(ctx context.Context, plan *Plan) error {
	if err := e.checkContract(ctx, plan, e.state.Snapshot()); err != nil {
		return err
	}
	e.contractChecked = plan
	return nil
}

// keyedHash is an HMAC-SHA256 under the input key when there is one, a
// plain SHA-256 otherwise.
func (e *Engine) keyedHash() hash.Hash {
	if len(e.inputKey) == 0 {
		return sha256.New()
	}
	return hmac.New(sha256.New, e.inputKey)
}

// keyed is the hex digest of s under the input key.
func (e *Engine) keyed(s string) string {
	h := e.keyedHash()
	h.Write([]byte(s))
	return hex.EncodeToString(h.Sum(nil))
}
