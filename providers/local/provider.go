package local

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// TypeName is the provider type under which cmd/migrate registers New.
const TypeName = "local"

// Step type names.
const (
	Exec      = "exec"
	HTTPCheck = "http_check"
	Approval  = "approval"
	Wait      = "wait"
)

// Provider runs steps on the local machine. It is safe for concurrent use.
type Provider struct {
	dir string // the runbook directory, set by Configure

	// noPIDNS is set once making a PID namespace failed for lack of
	// privilege; commands then run in their own process group.
	noPIDNS atomic.Bool
	nsMu    sync.Mutex
	ns      *runNamespace // every command runs in it (Linux)

	httpOnce sync.Once
	http     atomic.Pointer[httpClients]
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// New returns an unconfigured local provider; it is a providers.Factory
// once wrapped: func() providers.Interface { return local.New() }.
func New() *Provider { return &Provider{} }

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{}},
	StepTypes: map[string]phases.StepType{
		Exec: {
			Description: "Runs a command given as an argv list; no shell unless the argv asks for one (\"sh\", \"-c\", ...).",
			Attributes: map[string]phases.Attribute{
				"command":        {Type: cty.List(cty.String), Required: true, Description: "The argv to run; the first element is looked up in PATH."},
				"env":            {Type: cty.Map(cty.String), Description: "Environment variables added to migrate's own (which lacks MIGRATE_VAR_* and MIGRATE_AGE_IDENTITY: pass what a command needs here)."},
				"dir":            {Type: cty.String, Description: "Working directory, relative to the runbook directory."},
				"revert":         {Type: cty.List(cty.String), Description: "The argv rollback runs to undo the command, with the same env and dir."},
				"creates":        {Type: cty.String, Description: "A path, relative to dir; the command is skipped when it exists."},
				"revert_creates": {Type: cty.String, Description: "A path, relative to dir, that the revert makes last: a revert resumed after an interruption is skipped when it exists."},
			},
			Outputs:  map[string]cty.Type{"exit_code": cty.Number},
			CanCheck: true,
		},
		HTTPCheck: {
			Description: "Waits until a URL answers an expected HTTP status. Redirects are not followed.",
			Attributes: map[string]phases.Attribute{
				"url":      {Type: cty.String, Required: true, Description: "The http:// or https:// URL to GET."},
				"status":   {Type: cty.Number, Description: "The status expected, 200 by default."},
				"timeout":  {Type: cty.String, Description: "How long to keep trying, \"60s\" by default."},
				"interval": {Type: cty.String, Description: "The pause between tries, \"1s\" by default."},
				"insecure": {Type: cty.Bool, Description: "Skip TLS certificate verification."},
			},
			Outputs:  map[string]cty.Type{"status": cty.Number},
			CanCheck: true,
		},
		Approval: {
			Description: "A human gate: asks at the terminal, or needs --approve ADDRESS; records who approved and when.",
			Attributes: map[string]phases.Attribute{
				"message": {Type: cty.String, Required: true, Description: "What the person must have done or agree to."},
			},
			Outputs: map[string]cty.Type{"approved_by": cty.String},
		},
		Wait: {
			Description: "A pause of a given duration.",
			Attributes: map[string]phases.Attribute{
				"duration": {Type: cty.String, Required: true, Description: "How long to wait, such as \"30s\"; \"0s\" is allowed."},
			},
		},
	},
}

// Schema describes the step types.
func (p *Provider) Schema() phases.Schema { return schema }

// Configure records the runbook directory; the provider block has no
// attributes.
func (p *Provider) Configure(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	dir := req.Dir
	if dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	p.dir = dir
	return providers.ConfigureResponse{}
}

func unsupported(typ string) phases.Diagnostics {
	return phases.Errorf("Unsupported Step Type", "The local provider has no step type %q; it has exec, http_check, approval and wait.", typ)
}

// Read observes a step: exec through its creates path, the others by
// whether they completed.
func (p *Provider) Read(_ context.Context, req providers.ReadRequest) providers.ReadResponse {
	switch req.Type {
	case Exec:
		return p.readExec(req)
	case HTTPCheck, Approval, Wait:
		return providers.PresentIfPrior(req)
	}
	return providers.ReadResponse{Diagnostics: unsupported(req.Type)}
}

// Plan validates the configuration and describes what Apply would do.
func (p *Provider) Plan(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
	switch req.Type {
	case Exec:
		return p.planExec(req)
	case HTTPCheck:
		return planHTTP(req)
	case Approval:
		return planApproval(req)
	case Wait:
		return planWait(req)
	}
	return providers.PlanResponse{Diagnostics: unsupported(req.Type)}
}

// Apply runs a step.
func (p *Provider) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	switch req.Type {
	case Exec:
		return p.applyExec(ctx, req)
	case HTTPCheck:
		return p.applyHTTP(ctx, req)
	case Approval:
		return applyApproval(ctx, req)
	case Wait:
		return applyWait(ctx, req)
	}
	return providers.ApplyResponse{Diagnostics: unsupported(req.Type)}
}

// Revert runs an exec step's revert command; the other step types have
// nothing to undo.
func (p *Provider) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	switch req.Type {
	case Exec:
		return p.revertExec(ctx, req)
	case HTTPCheck, Approval, Wait:
		return providers.RevertResponse{}
	}
	return providers.RevertResponse{Diagnostics: unsupported(req.Type)}
}

// Close releases idle HTTP connections.
func (p *Provider) Close() error {
	if c := p.http.Load(); c != nil {
		c.close()
	}
	p.nsMu.Lock()
	if p.ns != nil {
		p.ns.close() // and whatever commands left in it
		p.ns = nil
	}
	p.nsMu.Unlock()
	return nil
}

// nothingToUndo is the inverse of steps without a lasting effect.
func nothingToUndo() *providers.Inverse { return &providers.Inverse{Description: "nothing to undo"} }

// noOutputs is the outputs value of a step type without outputs.
var noOutputs = cty.EmptyObjectVal

// interrupted is the diagnostic of a step stopped by its context.
func interrupted(addr phases.Address, err error) phases.Diagnostics {
	return phases.Errorf("Step Interrupted", "%s was stopped before it finished: %v.", addr, err)
}
