package sdk

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
)

// Provider is a providers.Interface (and Reverter, InputDigester,
// Closer) made of step types. S is what Configure makes of the provider
// block: a client, a directory, the provider itself.
type Provider[S any] struct {
	// Name is the provider type, as in messages ("the local provider").
	Name string
	// Settings is the provider block's attributes struct (value or
	// type), its schema; nil: the block has no attributes.
	Settings any
	// ConfigureFunc makes S from the provider block; decode the block with
	// Decode. Nil: S's zero value.
	ConfigureFunc func(ctx context.Context, req providers.ConfigureRequest) (S, phases.Diagnostics)
	// CloseFunc, when set, releases what S holds.
	CloseFunc func() error
	Steps     []Step[S]
	// Scrub, when set, makes each call's scrubber (a provider whose
	// secrets have a shape, such as YAML keys, sets a Filter).
	Scrub func(S) *secret.Scrubber

	once   sync.Once
	sch    phases.Schema
	byName map[string]Step[S]

	mu          sync.RWMutex
	configured  bool
	settings    S
	configDiags phases.Diagnostics
}

var (
	_ providers.Interface     = (*Provider[int])(nil)
	_ providers.Reverter      = (*Provider[int])(nil)
	_ providers.InputDigester = (*Provider[int])(nil)
	_ providers.Closer        = (*Provider[int])(nil)
)

// init derives the schema; a step type that cannot be described is a
// programming error, found by the first test that touches the provider.
func (p *Provider[S]) init() {
	p.once.Do(func() {
		if err := p.Validate(); err != nil {
			panic("sdk: " + err.Error())
		}
	})
}

// Validate derives the schema and says what is wrong with it, if anything.
func (p *Provider[S]) Validate() error {
	block := map[string]phases.Attribute{}
	if p.Settings != nil {
		var err error
		if block, err = Attributes(p.Settings); err != nil {
			return fmt.Errorf("%s provider block: %w", p.Name, err)
		}
	}
	sch := phases.Schema{Provider: phases.Block{Attributes: block}, StepTypes: map[string]phases.StepType{}}
	byName := map[string]Step[S]{}
	for _, s := range p.Steps {
		st, err := s.schema()
		if err != nil {
			return fmt.Errorf("%s provider: %w", p.Name, err)
		}
		if _, dup := byName[s.name()]; dup {
			return fmt.Errorf("%s provider: step type %s declared twice", p.Name, s.name())
		}
		sch.StepTypes[s.name()] = st
		byName[s.name()] = s
	}
	p.sch, p.byName = sch, byName
	return nil
}

// Schema describes the provider block and the step types.
func (p *Provider[S]) Schema() phases.Schema {
	p.init()
	return p.sch
}

// Configure runs the provider's Configure once; errors are kept, and
// every later call is refused with them.
func (p *Provider[S]) Configure(ctx context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	p.init()
	var s S
	var diags phases.Diagnostics
	if p.ConfigureFunc != nil {
		s, diags = p.ConfigureFunc(ctx, req)
	}
	// Its diagnostics leave the provider too: scrubbed of the block's
	// secrets and of those the provider knows (decrypted files).
	sc := &secret.Scrubber{}
	if p.Scrub != nil && !diags.HasErrors() {
		sc = p.Scrub(s)
	}
	sc.AddMarked(req.Config)
	diags = sc.Diags(diags)
	p.mu.Lock()
	p.configured, p.settings, p.configDiags = true, s, diags
	p.mu.Unlock()
	return providers.ConfigureResponse{Diagnostics: diags}
}

// Decode decodes a provider block into the struct target points to,
// learning its secrets into scrub (nil: none kept).
func Decode(req providers.ConfigureRequest, target any, scrub *secret.Scrubber) phases.Diagnostics {
	attrs, err := Attributes(target)
	if err != nil {
		panic("sdk: " + err.Error())
	}
	if scrub == nil {
		scrub = &secret.Scrubber{}
	}
	c, diags := prepare(phases.Address{Type: "provider", Name: req.Name}, req.Config, attrs, objectType(attrs), scrub)
	if diags.HasErrors() {
		return diags
	}
	if names := c.unknown(); len(names) > 0 {
		return phases.Errorf("Unknown Provider Attribute", "The %s provider block depends on values not known yet (%s).", req.Name, andList(names))
	}
	if diags = c.required(); diags.HasErrors() {
		return diags
	}
	return c.decode(target)
}

// gate finds the step type of a call and makes its Call, or says why the
// call may not go on.
func (p *Provider[S]) gate(typ string, addr phases.Address, log io.Writer) (Step[S], *Call[S], phases.Diagnostics) {
	p.init()
	s, ok := p.byName[typ]
	if !ok {
		return nil, nil, phases.Errorf("Unsupported Step Type", "The %s provider has no step type %q; it has %s.",
			p.Name, typ, andList(slices.Sorted(maps.Keys(p.byName))))
	}
	p.mu.RLock()
	configured, settings, cd := p.configured, p.settings, p.configDiags
	p.mu.RUnlock()
	if cd.HasErrors() {
		return nil, nil, phases.Errorf("Provider Configuration Invalid", "The %s provider block has errors (reported when it was configured); fix them first.", p.Name)
	}
	if !configured {
		return nil, nil, phases.Errorf("Provider Not Configured", "The %s provider was used before its provider block was configured.", p.Name)
	}
	scrub := &secret.Scrubber{}
	if p.Scrub != nil {
		scrub = p.Scrub(settings)
	}
	c := &Call[S]{Settings: settings, Type: typ, Addr: addr, Scrub: scrub}
	c.Log = secret.NewWriter(log, scrub)
	return s, c, nil
}

// Read observes a step.
func (p *Provider[S]) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	s, c, diags := p.gate(req.Type, req.Addr, nil)
	if diags != nil {
		return providers.ReadResponse{Diagnostics: diags}
	}
	c.InFlight, c.Rebase = req.InFlight, req.Rebase
	r := s.read(ctx, c, req)
	sc := c.scrubber()
	r.Detail = sc.text(r.Detail)
	r.Identity = sc.text(r.Identity)
	r.Outputs = sc.outputs(r.Outputs)
	r.Revert = scrubRevert(sc, r.Revert)
	r.Diagnostics = sc.diags(r.Diagnostics)
	return r
}

// Plan describes what Apply would do.
func (p *Provider[S]) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	s, c, diags := p.gate(req.Type, req.Addr, nil)
	if diags != nil {
		return providers.PlanResponse{Diagnostics: diags}
	}
	c.AfterChanges = req.AfterChanges
	r := s.plan(ctx, c, req)
	sc := c.scrubber()
	r.Diff = sc.text(r.Diff)
	r.Irreversible = sc.text(r.Irreversible)
	r.Diagnostics = sc.diags(r.Diagnostics)
	return r
}

// Apply runs a step; its log is flushed before it returns.
func (p *Provider[S]) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	s, c, diags := p.gate(req.Type, req.Addr, req.Log)
	if diags != nil {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	c.Approval, c.Stop, c.intent = req.Approval, req.Stop, req.Intent
	r := s.apply(ctx, c, req)
	_ = c.Log.Flush()
	sc := c.scrubber()
	r.Outputs = sc.outputs(r.Outputs)
	r.Revert = scrubRevert(sc, r.Revert)
	r.Facts = sc.record(r.Facts)
	r.Identity = sc.text(r.Identity)
	r.Diagnostics = sc.diags(r.Diagnostics)
	return r
}

// Revert undoes a step; its log is flushed before it returns.
func (p *Provider[S]) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	s, c, diags := p.gate(req.Type, req.Addr, req.Log)
	if diags != nil {
		return providers.RevertResponse{Diagnostics: diags}
	}
	r := s.revert(ctx, c, req)
	_ = c.Log.Flush()
	r.Diagnostics = c.scrubber().diags(r.Diagnostics)
	return r
}

// InputDigest is the step type's Digest, if it has one.
func (p *Provider[S]) InputDigest(ctx context.Context, req providers.DigestRequest) providers.DigestResponse {
	s, c, diags := p.gate(req.Type, req.Addr, nil)
	if diags != nil {
		return providers.DigestResponse{Diagnostics: diags}
	}
	r := s.digest(ctx, c, req)
	r.Resolved = c.scrubber().text(r.Resolved)
	r.Diagnostics = c.scrubber().diags(r.Diagnostics)
	return r
}

// Close runs the provider's Close, if it has one.
func (p *Provider[S]) Close() error {
	if p.CloseFunc == nil {
		return nil
	}
	return p.CloseFunc()
}

// scrubRevert scrubs the description (the data is scrubbed when encoded).
func scrubRevert(sc *scrubber, inv *providers.RevertData) *providers.RevertData {
	if inv == nil {
		return nil
	}
	out := *inv
	out.Description = sc.text(out.Description)
	return &out
}

// andList joins names as "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
