package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// lazyProvider is a provider whose block uses step outputs
// (endpoints = [incus_instance.talos.ipv4]). It is configured at its first
// use, with the outputs known then, and never again in the run: what its
// steps did was done against that configuration.
type lazyProvider struct {
	mu         sync.Mutex
	pc         *phases.ProviderConfig
	configured bool
	failed     phases.Diagnostics // the errors of that one Configure
}

// use returns the provider of s, configured. A provider whose block uses
// step outputs is configured here the first time, with the outputs out
// holds; while some of them are not known yet, it returns no provider and
// the steps they wait for.
func (e *Engine) use(ctx context.Context, s *phases.Step, out *outputs) (providers.Interface, []phases.Address, phases.Diagnostics) {
	p, lp := e.providers[s.Provider], e.lazy[s.Provider]
	if lp == nil {
		return p, nil, nil
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.configured {
		if lp.failed != nil {
			return nil, nil, lp.failed
		}
		return p, nil, nil
	}
	out.mu.RLock()
	cfg, diags := lp.pc.Config.Evaluate(out.m)
	out.mu.RUnlock()
	diags = withSubject(diags, lp.pc.Range)
	if diags.HasErrors() {
		return nil, nil, diags
	}
	cfg, after := stripKnownAfter(cfg)
	if !cfg.IsWhollyKnown() {
		if len(after) == 0 {
			after = lp.pc.DependsOn
		}
		return nil, after, diags
	}
	resp := p.Configure(ctx, providers.ConfigureRequest{Name: lp.pc.Name, Config: cfg, Dir: e.runbook.Dir, StateDir: e.stateDir})
	lp.configured = true
	diags = append(diags, withSubject(resp.Diagnostics, lp.pc.Range)...)
	if diags.HasErrors() {
		lp.failed = diags
		return nil, nil, diags
	}
	return p, nil, diags
}

// providerNotReady is the error of a step about to run whose provider
// still waits for step outputs (the steps it needs did not run).
func providerNotReady(s *phases.Step, after []phases.Address) error {
	return fmt.Errorf("its provider %s cannot be configured: its block uses outputs of %s, not known yet", s.Provider, joinAddrs(after))
}

// union adds the addresses of b missing from a, sorted.
func union(a, b []phases.Address) []phases.Address {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(x, y phases.Address) int { return strings.Compare(x.String(), y.String()) })
	return out
}
