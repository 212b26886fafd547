package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/state"
)

// DefaultParallelism is how many steps of a phase run at once unless told.
const DefaultParallelism = 10

// Options configure an Engine.
type Options struct {
	Runbook *phases.Runbook
	// Factories maps a provider type to its constructor; cmd/migrate
	// builds it, tests pass fakes.
	Factories map[string]providers.Factory
	State     state.Manager
	// Hooks receive every event after the state has recorded it.
	Hooks       []Hook
	Parallelism int
	// Log, when set, receives every event in full, secrets redacted;
	// what the state and the hooks get has errors cut to
	// state.MaxErrorBytes, with a pointer to it.
	Log *state.Log
	// InputKey keys the input hashes kept in the state and in saved
	// plans (HMAC-SHA256), so that a state or a plan does not let a
	// weak secret be guessed offline. Every runner of a state must use
	// the same one; without one the hashes are plain SHA-256 and a
	// sensitive value does not enter a plan's contract.
	InputKey []byte
	// StateDir is where providers may keep files with the state
	// (providers.ConfigureRequest.StateDir).
	StateDir string
}

// Engine plans, runs and rolls back one runbook against one state.
type Engine struct {
	runbook     *phases.Runbook
	stateDir    string // providers.ConfigureRequest.StateDir
	state       state.Manager
	hooks       *hooks
	parallelism int
	providers   map[string]providers.Interface // by ProviderConfig.Key()
	lazy        map[string]*lazyProvider       // those configured at first use
	steps       map[phases.Address]*phases.Step
	discardedBy map[phases.Address][]phases.Address // Step.Discards, inverted
	phaseOrder  []*phases.Phase                     // e.order.List
	order       *phases.Order
	// groupInstances are the group call instances the runbook has, by
	// their prefix (group.CALL["KEY"]): a record of another is of an
	// instance whose key left the call's for_each (foreach.go).
	groupInstances map[string]bool
	// origins are the first addresses of the records the runbook's moved
	// blocks carry, by their new ones (movedOrigins).
	origins map[string]string
	// windows says which steps open and close a service's window.
	windows map[phases.Address]windowEnd

	rebaseTypes sync.Map // "provider type" -> its schema says Rebase

	inputKey []byte // Options.InputKey
	// contractChecked is the saved plan CheckSavedPlan accepted.
	contractChecked *Plan
}

// New instantiates every provider the runbook declares and configures
// those whose blocks use no step outputs; the others are configured at
// their first use (Engine.use).
func New(ctx context.Context, opts Options) (*Engine, phases.Diagnostics) {
	e := &Engine{
		runbook:     opts.Runbook,
		stateDir:    opts.StateDir,
		state:       opts.State,
		parallelism: opts.Parallelism,
		providers:   map[string]providers.Interface{},
		lazy:        map[string]*lazyProvider{},
		steps:       map[phases.Address]*phases.Step{},
		discardedBy: map[phases.Address][]phases.Address{},
		inputKey:    opts.InputKey,
	}
	e.groupInstances = map[string]bool{}
	e.origins = movedOrigins(opts.Runbook.Moved)
	e.windows = windowEnds(opts.Runbook.Services)
	if e.parallelism <= 0 {
		e.parallelism = DefaultParallelism
	}
	e.hooks = &hooks{
		list:     append([]Hook{StateHook{State: opts.State}}, opts.Hooks...),
		redactor: newRedactor(opts.Runbook.Secrets),
		log:      opts.Log,
	}
	for _, s := range opts.Runbook.AllSteps() {
		e.steps[s.Addr] = s
		if s.Addr.Group != "" {
			e.groupInstances[s.Addr.GroupPrefix()] = true
		}
		for _, d := range s.Discards {
			e.discardedBy[d] = append(e.discardedBy[d], s.Addr)
		}
	}
	var diags phases.Diagnostics
	order, err := phases.OrderPhases(opts.Runbook.Phases)
	if err != nil {
		return nil, phases.FromError("Invalid phase order", err)
	}
	e.order, e.phaseOrder = order, order.List

	for _, pc := range opts.Runbook.Providers {
		f, ok := opts.Factories[pc.Type]
		if !ok {
			diags = append(diags, withSubject(phases.Errorf("Unknown provider type", "No provider of type %q is built into this migrate. Known types: %s.",
				pc.Type, strings.Join(sortedKeys(opts.Factories), ", ")), pc.Range)...)
			continue
		}
		p := f()
		if len(pc.DependsOn) > 0 {
			e.providers[pc.Key()] = p
			e.lazy[pc.Key()] = &lazyProvider{pc: pc}
			continue
		}
		cfg := cty.EmptyObjectVal
		if pc.Config != nil {
			v, d := pc.Config.Evaluate(nil)
			diags = append(diags, d...)
			if d.HasErrors() {
				continue
			}
			cfg = v
		}
		resp := p.Configure(ctx, providers.ConfigureRequest{Name: pc.Name, Config: cfg, Dir: opts.Runbook.Dir, StateDir: opts.StateDir})
		diags = append(diags, withSubject(resp.Diagnostics, pc.Range)...)
		e.providers[pc.Key()] = p
	}
	for _, s := range e.steps {
		if _, ok := e.providers[s.Provider]; !ok && !diags.HasErrors() {
			diags = append(diags, withSubject(phases.Errorf("Provider not configured", "Step %s uses provider %q, which the runbook does not configure.", s.Addr, s.Provider), s.Range)...)
		}
	}
	if diags.HasErrors() {
		e.Close()
		return nil, diags
	}
	return e, diags
}

// Close releases provider resources.
func (e *Engine) Close() error {
	var errs []error
	for _, p := range e.providers {
		if c, ok := p.(providers.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("closing providers: %v", errs)
	}
	return nil
}

// Phases returns the phases in the order they run.
func (e *Engine) Phases() []*phases.Phase { return e.phaseOrder }

func (e *Engine) provider(s *phases.Step) providers.Interface { return e.providers[s.Provider] }

// selectPhases resolves names to phases in run order; empty means all.
func (e *Engine) selectPhases(names []string) ([]*phases.Phase, error) {
	if len(names) == 0 {
		return e.phaseOrder, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		n = phases.Name(n)
		if e.runbook.Phase(n) == nil {
			var known []string
			for _, p := range e.phaseOrder {
				known = append(known, p.Name)
			}
			return nil, fmt.Errorf("no phase named %q; the runbook has: %s", n, strings.Join(known, ", "))
		}
		want[n] = true
	}
	var out []*phases.Phase
	for _, p := range e.phaseOrder {
		if want[p.Name] {
			out = append(out, p)
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
