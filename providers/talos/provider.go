package talos

import (
	"context"
	"io"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "talos"

// Step type names.
const (
	MachineConfig = "talos_machine_config"
	Bootstrap     = "talos_bootstrap"
	Kubeconfig    = "talos_kubeconfig"
	Read          = "talos_read"
	ServiceHealth = "talos_service_health"
	Upgrade       = "talos_upgrade"
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

var verifyType = cty.ObjectWithOptionalAttrs(map[string]cty.Type{
	"services":   cty.List(cty.String),
	"files":      cty.Map(cty.String),
	"kubernetes": cty.Bool,
}, []string{"services", "files", "kubernetes"})

var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{
		"endpoints":          {Type: cty.List(cty.String), Description: "Talos API endpoints (host or host:port); default the talosconfig context's."},
		"nodes":              {Type: cty.List(cty.String), Description: "Nodes to act on; default the context's nodes, else the endpoints."},
		"talosconfig":        {Type: cty.String, Description: "Path to the talosconfig, relative to the runbook; may be age-encrypted. Default $TALOSCONFIG or ~/.talos/config."},
		"context":            {Type: cty.String, Description: "The talosconfig context; default its current context."},
		"version":            {Type: cty.String, Required: true, Description: "The Talos version the cluster runs, such as \"v1.13.3\": configs are rendered for it and steps refuse a node running another."},
		"kubernetes_version": {Type: cty.String, Description: "The Kubernetes version; default machinery's default."},
		"cluster_name":       {Type: cty.String, Description: "The cluster name; default the talosconfig context's cluster, else \"talos\"."},
		"cluster_endpoint":   {Type: cty.String, Description: "The Kubernetes API endpoint, https://IP:6443; default the first endpoint on port 6443."},
		"secrets":            {Type: cty.String, Description: "Path to the secrets bundle YAML (talosctl gen secrets), relative to the runbook; may be age-encrypted."},
		"install_disk":       {Type: cty.String, Description: "The install disk, \"/dev/sda\" by default."},
		"schematic":          {Type: cty.String, Description: "An Image Factory schematic as YAML; the installer image is factory.talos.dev/metal-installer/<its ID>:<version>."},
		"extensions":         {Type: cty.List(cty.String), Description: "Official system extensions (such as \"siderolabs/i915\") making the schematic, instead of schematic."},
		"age_identity":       {Type: cty.String, Description: "Path to an age identity file; default $MIGRATE_AGE_IDENTITY (an identity or a path)."},
	}},
	StepTypes: map[string]phases.StepType{
		MachineConfig: {
			Description: "Renders the machine config (secrets bundle + patches, pinned version), validates it, shows the node's dry-run diff, then applies it with TRY, the verify checks and the permanent apply.",
			Attributes: map[string]phases.Attribute{
				"role":        {Type: cty.String, Description: "\"controlplane\" (default) or \"worker\"."},
				"patches":     {Type: cty.List(cty.String), Description: "Patch files (strategic merge, multi-document, or JSON patches), relative to the runbook."},
				"mode":        {Type: cty.String, Description: "\"no-reboot\" (default), \"auto\" or \"reboot\": what the permanent apply may do."},
				"try_timeout": {Type: cty.String, Description: "How long the TRY stays before the node reverts it by itself, \"1m\" by default."},
				"verify":      {Type: verifyType, Description: "Checks run while the TRY is pending: services (healthy), files (path -> content, read through the API), kubernetes (the API answers)."},
				"rendered":    {Type: cty.String, Description: "Write the rendered config here (mode 0600) for review."},
			},
			Outputs: map[string]cty.Type{"config_hash": cty.String, "installer_image": cty.String},
		},
		Bootstrap: {
			Description: "Bootstraps etcd on the node, once; a node already bootstrapped counts as done. Cannot be undone.",
			Attributes:  map[string]phases.Attribute{},
		},
		Kubeconfig: {
			Description: "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps.",
			Attributes: map[string]phases.Attribute{
				"path": {Type: cty.String, Required: true, Description: "Where to write the kubeconfig, relative to the runbook."},
			},
			Outputs: map[string]cty.Type{"path": cty.String},
		},
		Read: {
			Description: "Reads a file through the Talos API and compares its content.",
			Attributes: map[string]phases.Attribute{
				"path":     {Type: cty.String, Required: true, Description: "The file on the node, such as /var/mnt/data/.probe."},
				"expect":   {Type: cty.String, Description: "The exact content expected, compared with surrounding whitespace trimmed."},
				"contains": {Type: cty.String, Description: "A string the content must contain."},
			},
			CanCheck: true,
		},
		ServiceHealth: {
			Description: "Checks that Talos services are running and healthy.",
			Attributes: map[string]phases.Attribute{
				"services": {Type: cty.List(cty.String), Required: true, Description: "Service IDs, such as [\"etcd\", \"kubelet\"]."},
			},
			CanCheck: true,
		},
		Upgrade: {
			Description: "Upgrades Talos to a target version with the Image Factory installer of the schematic, and waits until the node runs it.",
			Attributes: map[string]phases.Attribute{
				"version":  {Type: cty.String, Required: true, Description: "The target Talos version, such as \"v1.13.3\"."},
				"preserve": {Type: cty.Bool, Description: "Keep the ephemeral partition's data."},
			},
			Outputs: map[string]cty.Type{"version": cty.String, "image": cty.String},
		},
	},
}

// Schema describes the provider block and the step types.
func (p *Provider) Schema() phases.Schema { return schema }

// Configure reads the provider block: it loads (and decrypts) the
// talosconfig and the secrets bundle, but connects to nothing yet.
func (p *Provider) Configure(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	cfg, diags := configure(req)
	p.cfg, p.cfgDiags = cfg, diags
	return providers.ConfigureResponse{Diagnostics: cfg.scrub.Diags(diags)}
}

func unsupported(typ string) phases.Diagnostics {
	return phases.Errorf("Unsupported Step Type", "The talos provider has no step type %q; it has %s, %s, %s, %s, %s and %s.",
		typ, MachineConfig, Bootstrap, Kubeconfig, Read, ServiceHealth, Upgrade)
}

// ready returns the settings, or diagnostics when Configure failed.
func (p *Provider) ready() (*settings, phases.Diagnostics) {
	if p.cfg == nil {
		return nil, phases.Errorf("Provider Not Configured", "The talos provider was used before its provider block was configured.")
	}
	if p.cfgDiags.HasErrors() {
		return nil, phases.Errorf("Provider Configuration Invalid", "The talos provider block has errors (reported when it was configured); fix them first.")
	}
	return p.cfg, nil
}

// begin starts a call: the step type must be this provider's and the
// provider configured.
func (p *Provider) begin(typ string, addr phases.Address, cfg cty.Value, log io.Writer) (*call, phases.Diagnostics) {
	if _, ok := schema.StepTypes[typ]; !ok {
		return nil, unsupported(typ)
	}
	s, diags := p.ready()
	if diags != nil {
		return nil, diags
	}
	return newCall(s, addr, cfg, log), nil
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
	case Bootstrap:
		r = p.planBootstrap(ctx, c)
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
