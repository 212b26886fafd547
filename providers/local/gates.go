package local

import (
	"context"
	"fmt"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

func decodeApproval(addr phases.Address, cfg cty.Value) (val, *decoder) {
	d := newDecoder(addr, cfg)
	msg := d.str("message")
	if msg.null {
		d.missing("message")
	}
	return msg, d
}

func planApproval(req providers.PlanRequest) providers.PlanResponse {
	msg, d := decodeApproval(req.Addr, req.Config)
	if d.diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: d.diags}
	}
	return providers.PlanResponse{Diff: "ask a person: " + msg.show()}
}

// applyApproval passes when --approve named the step, or when the person
// at the terminal says yes. It records who approved and when.
func applyApproval(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	msg, d := decodeApproval(req.Addr, req.Config)
	if !d.diags.HasErrors() && msg.unknown {
		d.errorf("Unknown Attribute Value", "The \"message\" attribute of %s is not known; it depends on a step that has not run.", req.Addr)
	}
	if d.diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d.diags}
	}
	if err := ctx.Err(); err != nil {
		return providers.ApplyResponse{Diagnostics: interrupted(req.Addr, err)}
	}
	by := req.Approval.By
	switch {
	case by != "":
	case req.Approval.Prompt != nil:
		ok, err := req.Approval.Prompt(fmt.Sprintf("Approve %s? %s", req.Addr, msg.show()))
		if err != nil {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Approval Failed", "Could not ask for the approval of %s: %v.", req.Addr, err)}
		}
		if !ok {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Approval Refused", "Step %s was not approved: only 'yes' approves it.", req.Addr)}
		}
		by = localUser()
	default:
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Approval Required",
			"Approval required: step %s needs a person: rerun with --approve %s, or run it in a terminal.", req.Addr, req.Addr)}
	}
	return providers.ApplyResponse{
		Outputs: cty.ObjectVal(map[string]cty.Value{"approved_by": cty.StringVal(by)}),
		Inverse: nothingToUndo(),
		Record:  map[string]string{"approved_by": by, "approved_at": time.Now().UTC().Format(time.RFC3339)},
	}
}

func decodeWait(addr phases.Address, cfg cty.Value) (time.Duration, val, *decoder) {
	d := newDecoder(addr, cfg)
	dur, v := d.duration("duration", "", true)
	return dur, v, d
}

func planWait(req providers.PlanRequest) providers.PlanResponse {
	_, v, d := decodeWait(req.Addr, req.Config)
	if d.diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: d.diags}
	}
	return providers.PlanResponse{Diff: "wait " + v.show()}
}

// waitDone is the inverse of every wait step; Apply returns a copy.
var waitDone = providers.Inverse{Description: "nothing to undo"}

// applyWait sleeps, or returns at once for "0s": thousands of zero waits
// must cost next to nothing.
func applyWait(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	dur, v, d := decodeWait(req.Addr, req.Config)
	if !d.diags.HasErrors() && v.unknown {
		d.errorf("Unknown Attribute Value", "The \"duration\" attribute of %s is not known; it depends on a step that has not run.", req.Addr)
	}
	if d.diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: d.diags}
	}
	if err := ctx.Err(); err != nil {
		return providers.ApplyResponse{Diagnostics: interrupted(req.Addr, err)}
	}
	if dur > 0 {
		t := time.NewTimer(dur)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return providers.ApplyResponse{Diagnostics: interrupted(req.Addr, context.Cause(ctx))}
		}
	}
	inv := waitDone
	return providers.ApplyResponse{Outputs: noOutputs, Inverse: &inv}
}
