package fake

import (
	"context"
	"sync"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// StepType is the step type of the default schema.
const StepType = "fake_step"

// Provider is a fake provider. Set fields before handing it to the engine;
// read the recorded ones after the engine returned, or through the
// accessor methods while it runs. It is safe for concurrent use.
//
// An XFn is called without the lock held, so it may block (waiting for
// ctx, say) without holding up concurrent calls.
type Provider struct {
	// SchemaResp is returned by Schema; New sets the default schema.
	SchemaResp phases.Schema

	ConfigureCalled  bool
	ConfigureRequest providers.ConfigureRequest
	ConfigureFn      func(context.Context, providers.ConfigureRequest) providers.ConfigureResponse

	ReadCalled  bool
	ReadRequest providers.ReadRequest
	ReadFn      func(context.Context, providers.ReadRequest) providers.ReadResponse

	PlanCalled  bool
	PlanRequest providers.PlanRequest
	PlanFn      func(context.Context, providers.PlanRequest) providers.PlanResponse

	ApplyCalled  bool
	ApplyRequest providers.ApplyRequest
	ApplyFn      func(context.Context, providers.ApplyRequest) providers.ApplyResponse

	RevertCalled  bool
	RevertRequest providers.RevertRequest
	RevertFn      func(context.Context, providers.RevertRequest) providers.RevertResponse

	CloseCalled bool

	// ApplyCount and RevertCount count calls by step address, successful
	// or not.
	ApplyCount  map[string]int
	RevertCount map[string]int
	// ApplyOrder lists the addresses in the order Apply was called.
	ApplyOrder []string

	mu      sync.Mutex
	applied map[string]bool // applied successfully and not reverted since
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// Schema returns the default schema: one step type, fake_step, with
// attributes value (string) and fail (bool), both optional, and an output
// value.
func Schema() phases.Schema {
	return phases.Schema{
		Provider: phases.Block{Attributes: map[string]phases.Attribute{
			"endpoint": {Type: cty.String, Description: "Ignored; lets tests configure the provider."},
		}},
		StepTypes: map[string]phases.StepType{
			StepType: {
				Description: "A step that does nothing but return its value.",
				Attributes: map[string]phases.Attribute{
					"value": {Type: cty.String, Description: "Returned as the output value."},
					"fail":  {Type: cty.Bool, Description: "Make Apply fail."},
				},
				Outputs:  map[string]cty.Type{"value": cty.String},
				CanCheck: true,
			},
		},
	}
}

// New returns a fake provider with the default schema and behaviour.
func New() *Provider {
	return &Provider{SchemaResp: Schema()}
}

// Factory returns a providers.Factory that always hands out p, so a test
// can inspect the instance the engine used.
func Factory(p *Provider) providers.Factory {
	return func() providers.Interface { return p }
}

func (p *Provider) Schema() phases.Schema {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.SchemaResp
}

func (p *Provider) Configure(ctx context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	p.mu.Lock()
	p.ConfigureCalled, p.ConfigureRequest = true, req
	fn := p.ConfigureFn
	p.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return providers.ConfigureResponse{}
}

// Read returns Present for an address this provider applied successfully
// (and did not revert since), Absent otherwise.
func (p *Provider) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	p.mu.Lock()
	p.ReadCalled, p.ReadRequest = true, req
	fn := p.ReadFn
	applied := p.applied[req.Addr.String()]
	p.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	if diags := p.checkType(req.Type); diags != nil {
		return providers.ReadResponse{Diagnostics: diags}
	}
	if applied {
		return providers.ReadResponse{Observation: providers.Present}
	}
	return providers.ReadResponse{Observation: providers.Absent}
}

// Plan returns the diff `value: "X"`.
func (p *Provider) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	p.mu.Lock()
	p.PlanCalled, p.PlanRequest = true, req
	fn := p.PlanFn
	p.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	if diags := p.checkType(req.Type); diags != nil {
		return providers.PlanResponse{Diagnostics: diags}
	}
	return providers.PlanResponse{Diff: "value: " + show(attr(req.Config, "value"))}
}

// Apply returns the value attribute as the output value, or fails when
// fail is true or ctx is done.
func (p *Provider) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	addr := req.Addr.String()
	p.mu.Lock()
	p.ApplyCalled, p.ApplyRequest = true, req
	if p.ApplyCount == nil {
		p.ApplyCount = map[string]int{}
	}
	p.ApplyCount[addr]++
	p.ApplyOrder = append(p.ApplyOrder, addr)
	fn := p.ApplyFn
	p.mu.Unlock()

	var resp providers.ApplyResponse
	switch {
	case fn != nil:
		resp = fn(ctx, req)
	default:
		resp = p.apply(ctx, req)
	}
	if !resp.Diagnostics.HasErrors() {
		p.mu.Lock()
		if p.applied == nil {
			p.applied = map[string]bool{}
		}
		p.applied[addr] = true
		p.mu.Unlock()
	}
	return resp
}

func (p *Provider) apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	if diags := p.checkType(req.Type); diags != nil {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	if err := ctx.Err(); err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "%s: %v.", req.Addr, err)}
	}
	if fail := attr(req.Config, "fail"); fail.Type() == cty.Bool && fail.IsKnown() && !fail.IsNull() {
		if plain, _ := fail.Unmark(); plain.True() {
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Fake Failure", "%s failed because fail = true.", req.Addr)}
		}
	}
	value := attr(req.Config, "value")
	if value.Type() != cty.String || !value.IsKnown() {
		value = cty.NullVal(cty.String)
	}
	return providers.ApplyResponse{
		Outputs: cty.ObjectVal(map[string]cty.Value{"value": value}),
		Revert:  &providers.RevertData{Description: "undo fake"},
	}
}

// Revert succeeds and forgets that the address was applied.
func (p *Provider) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	addr := req.Addr.String()
	p.mu.Lock()
	p.RevertCalled, p.RevertRequest = true, req
	if p.RevertCount == nil {
		p.RevertCount = map[string]int{}
	}
	p.RevertCount[addr]++
	fn := p.RevertFn
	p.mu.Unlock()
	var resp providers.RevertResponse
	if fn != nil {
		resp = fn(ctx, req)
	} else if diags := p.checkType(req.Type); diags != nil {
		resp.Diagnostics = diags
	}
	if !resp.Diagnostics.HasErrors() {
		p.mu.Lock()
		delete(p.applied, addr)
		p.mu.Unlock()
	}
	return resp
}

func (p *Provider) Close() error {
	p.mu.Lock()
	p.CloseCalled = true
	p.mu.Unlock()
	return nil
}

// Applied returns how many times Apply was called for addr.
func (p *Provider) Applied(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ApplyCount[addr]
}

// Reverted returns how many times Revert was called for addr.
func (p *Provider) Reverted(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.RevertCount[addr]
}

// Order returns a copy of the addresses in the order they were applied.
func (p *Provider) Order() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ApplyOrder...)
}

func (p *Provider) checkType(typ string) phases.Diagnostics {
	p.mu.Lock()
	_, ok := p.SchemaResp.StepTypes[typ]
	p.mu.Unlock()
	if !ok {
		return phases.Errorf("Unsupported Step Type", "The fake provider has no step type %q.", typ)
	}
	return nil
}

// attr returns an attribute of a step's config, or null.
func attr(cfg cty.Value, name string) cty.Value {
	if cfg == cty.NilVal || cfg.IsNull() || !cfg.IsKnown() {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	plain, marks := cfg.Unmark()
	if !plain.Type().IsObjectType() || !plain.Type().HasAttribute(name) {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	return plain.GetAttr(name).WithMarks(marks)
}

// show renders a value for the diff, redacting sensitive ones.
func show(v cty.Value) string {
	switch {
	case v.HasMark(phases.SensitiveMark):
		return phases.Redacted
	case !v.IsKnown():
		return "(known after apply)"
	case v.IsNull():
		return "null"
	case v.Type() == cty.String:
		return `"` + v.AsString() + `"`
	}
	return v.GoString()
}
