package talos

import (
	"context"
	"io"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// TypeName is the provider type (and the name its plugin program serves).
const TypeName = talosschema.TypeName

// Step type names.
const (
	MachineConfig = talosschema.MachineConfig
	Bootstrap     = talosschema.Bootstrap
	Kubeconfig    = talosschema.Kubeconfig
	Read          = talosschema.Read
	ServiceHealth = talosschema.ServiceHealth
	Upgrade       = talosschema.Upgrade
)

// Provider talks to Talos nodes through their machine API. It is safe for
// concurrent use once configured.
type Provider struct {
	cfg      *settings
	cfgDiags phases.Diagnostics

	mu     sync.Mutex
	client *client.Client
}

var (
	_ providers.Interface     = (*Provider)(nil)
	_ providers.Reverter      = (*Provider)(nil)
	_ providers.Closer        = (*Provider)(nil)
	_ providers.InputDigester = (*Provider)(nil)
)

// New returns an unconfigured Talos provider.
func New() *Provider { return &Provider{} }

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

var verifyType = talosschema.VerifyType

var schema = talosschema.Schema

// Schema describes the provider block and the step types.
func (p *Provider) Schema() phases.Schema { return schema }

// Configure reads the provider block: it loads (and decrypts) the
// talosconfig and the secrets bundle, but connects to nothing yet.
func (p *Provider) Configure(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	cfg, diags := configure(req)
	p.cfg, p.cfgDiags = cfg, diags
	return providers.ConfigureResponse{Diagnostics: cfg.scrub.Diags(diags)}
}

// begin starts a call: the step type must be this provider's and the
// provider configured.
func (p *Provider) begin(typ string, addr phases.Address, cfg cty.Value, log io.Writer) (*call, phases.Diagnostics) {
	if diags := providers.Gate(TypeName, schema, typ, p.cfg != nil, p.cfgDiags); diags != nil {
		return nil, diags
	}
	return newCall(p.cfg, addr, cfg, log), nil
}

// finish joins the call's own diagnostics to d, scrubbed of secrets.
func (c *call) finish(d phases.Diagnostics) phases.Diagnostics {
	return c.scrub.Diags(append(c.diags, d...))
}

// Read observes a step.
func (p *Provider) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.ReadResponse{Diagnostics: diags}
	}
	var r providers.ReadResponse
	switch req.Type {
	case MachineConfig:
		r = p.readMachineConfig(ctx, c, req)
	case Bootstrap:
		r = p.readBootstrap(req)
	case Kubeconfig:
		r = p.readKubeconfig(c, req)
	case Read, ServiceHealth:
		r = providers.PresentIfPrior(req)
	case Upgrade:
		r = p.readUpgrade(ctx, c, req)
	}
	r.Detail = c.scrub.Text(r.Detail)
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Plan validates a step and says what Apply would do.
func (p *Provider) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.PlanResponse{Diagnostics: diags}
	}
	var r providers.PlanResponse
	switch req.Type {
	case MachineConfig:
		r = p.planMachineConfig(ctx, c, req)
		if c.s.recipient == nil {
			// The previous config is kept only age-encrypted (sealInverse).
			r.Irreversible = "its previous config can be kept for rollback only age-encrypted, but " + c.s.noKeyWhy + ": set age_identity or " + IdentityEnv
		}
	case Bootstrap:
		r = p.planBootstrap(ctx, c)
		r.Irreversible = "bootstrapping etcd cannot be undone"
	case Kubeconfig:
		r = p.planKubeconfig(c)
	case Read:
		r = p.planRead(c)
	case ServiceHealth:
		r = p.planServiceHealth(c)
	case Upgrade:
		r = p.planUpgrade(ctx, c)
	}
	r.Diff = c.scrub.Text(r.Diff)
	r.Irreversible = c.scrub.Text(r.Irreversible)
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Apply runs a step.
func (p *Provider) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, req.Log)
	if diags != nil {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	defer c.log.Flush()
	var r providers.ApplyResponse
	if err := ctx.Err(); err != nil {
		r.Diagnostics = interrupted(req.Addr, err)
	} else {
		switch req.Type {
		case MachineConfig:
			r = p.applyMachineConfig(ctx, c, req)
		case Bootstrap:
			r = p.applyBootstrap(ctx, c)
		case Kubeconfig:
			r = p.applyKubeconfig(ctx, c)
		case Read:
			r = p.applyRead(ctx, c)
		case ServiceHealth:
			r = p.applyServiceHealth(ctx, c)
		case Upgrade:
			r = p.applyUpgrade(ctx, c)
		}
	}
	if r.Outputs == cty.NilVal {
		r.Outputs = cty.EmptyObjectVal
	}
	if r.Inverse != nil {
		r.Inverse.Description = c.scrub.Text(r.Inverse.Description)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Revert undoes a step with the inverse Apply returned.
func (p *Provider) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, req.Log)
	if diags != nil {
		return providers.RevertResponse{Diagnostics: diags}
	}
	defer c.log.Flush()
	var r providers.RevertResponse
	switch req.Type {
	case MachineConfig:
		r = p.revertMachineConfig(ctx, c, req)
	case Kubeconfig:
		r = p.revertKubeconfig(c, req)
	case Upgrade:
		r = p.revertUpgrade(ctx, c, req)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Close closes the connection to the nodes.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client = nil
	return err
}

// interrupted is the diagnostic of a step stopped by its context.
func interrupted(addr phases.Address, err error) phases.Diagnostics {
	return phases.Errorf("Step Interrupted", "%s was stopped before it finished: %v.", addr, err)
}

// InputDigest adds the rendered machine config's hash to a
// talos_machine_config step's input hash: a changed patch file, secrets
// bundle or pinned version is then planned as an update of the step.
func (p *Provider) InputDigest(_ context.Context, req providers.DigestRequest) providers.DigestResponse {
	if req.Type != MachineConfig {
		return providers.DigestResponse{}
	}
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.DigestResponse{Diagnostics: diags}
	}
	st, known := c.decodeMachineConfig()
	if !known {
		return providers.DigestResponse{Unknown: true}
	}
	if c.diags.HasErrors() {
		return providers.DigestResponse{Diagnostics: c.finish(nil)}
	}
	r, diags := c.render(st.role, st.patches)
	if diags.HasErrors() {
		return providers.DigestResponse{Diagnostics: c.scrub.Diags(diags)}
	}
	return providers.DigestResponse{Digest: r.hash}
}
