package helm

import (
	"context"
	"crypto/rand"
	"io"
	"sync"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
)

// TypeName is the provider type (and the name its plugin program serves).
const TypeName = helmschema.TypeName

// Step type names.
const (
	Namespace = helmschema.Namespace
	Release   = helmschema.Release
)

// Provider installs Helm releases and the namespaces they run in. It is
// safe for concurrent use once configured.
type Provider struct {
	cfg      *settings
	cfgDiags phases.Diagnostics

	clusters clusters

	// levels remembers the PodSecurity level each namespace WILL have, as
	// its kubernetes_namespace step says (from Plan, Apply and Read), so
	// that a later helm_release of the same run is checked against it.
	mu     sync.Mutex
	levels map[string]string

	// hmacKey keys the fingerprints of Secret values in manifest diffs:
	// comparable within a run, useless for guessing the value.
	hmacKey []byte
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// New returns an unconfigured Helm provider.
func New() *Provider {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &Provider{levels: map[string]string{}, hmacKey: key}
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

var kubeconfigAttr = helmschema.KubeconfigAttr

var schema = helmschema.Schema

// Schema describes the provider block and the step types.
func (p *Provider) Schema() phases.Schema { return schema }

// Configure reads the provider block; it connects to nothing yet.
func (p *Provider) Configure(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	cfg, diags := configure(req)
	p.cfg, p.cfgDiags = cfg, diags
	return providers.ConfigureResponse{Diagnostics: diags}
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
	case Namespace:
		r = p.readNamespace(ctx, c, req)
	case Release:
		r = p.readRelease(ctx, c, req)
	}
	r.Detail = c.scrub.Text(r.Detail)
	if r.Inverse != nil {
		r.Inverse.Description = c.scrub.Text(r.Inverse.Description)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Plan says what Apply would do.
func (p *Provider) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.PlanResponse{Diagnostics: diags}
	}
	var r providers.PlanResponse
	switch req.Type {
	case Namespace:
		r = p.planNamespace(ctx, c, req)
	case Release:
		r = p.planRelease(ctx, c, req)
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
		case Namespace:
			r = p.applyNamespace(ctx, c, req)
		case Release:
			r = p.applyRelease(ctx, c, req)
		}
	}
	if r.Outputs == cty.NilVal {
		r.Outputs = cty.NullVal(cty.Object(schema.StepTypes[req.Type].Outputs))
	}
	if r.Inverse != nil {
		r.Inverse.Description = c.scrub.Text(r.Inverse.Description)
		r.Inverse.Data = []byte(c.scrub.Text(string(r.Inverse.Data)))
	}
	r.Private = []byte(c.scrub.Text(string(r.Private)))
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
	case Namespace:
		r = p.revertNamespace(ctx, c, req)
	case Release:
		r = p.revertRelease(ctx, c, req)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Close forgets the cached clusters.
func (p *Provider) Close() error {
	p.clusters.mu.Lock()
	p.clusters.m = nil
	p.clusters.mu.Unlock()
	return nil
}

// cluster returns the cluster of a step: its own kubeconfig attribute, else
// the provider's.
func (p *Provider) cluster(c *call) (*cluster, bool, phases.Diagnostics) {
	path, known := c.str("kubeconfig", "")
	if !known {
		return nil, false, nil
	}
	if path == "" {
		path = c.s.kubeconfig
	} else {
		path = c.s.abs(path)
	}
	cl, err := p.clusters.get(path, c.s.contextName)
	if err != nil {
		return nil, true, phases.Errorf("Cannot Use Kubeconfig", "%s cannot reach Kubernetes: %v.", c.what, err)
	}
	return cl, true, nil
}

func (p *Provider) setLevel(ns, level string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.levels[ns] = level
}

func (p *Provider) level(ns string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.levels[ns]
	return l, ok
}

// interrupted is the diagnostic of a step stopped by its context.
func interrupted(addr phases.Address, err error) phases.Diagnostics {
	return phases.Errorf("Step Interrupted", "%s was stopped before it finished: %v.", addr, err)
}
