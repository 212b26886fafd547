package fake_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		New:            func() providers.Interface { return fake.New() },
		ProviderConfig: cty.ObjectVal(map[string]cty.Value{"endpoint": cty.StringVal("fake://")}),
		Dir:            t.TempDir(),
		Cases: []providertest.Case{
			{Type: fake.StepType, Reversible: true, Config: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("hello world"), "fail": cty.NullVal(cty.Bool)})},
		},
	})
}

func cfg(value string, fail bool) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(value), "fail": cty.BoolVal(fail)})
}

func addr(name string) phases.Address { return phases.Address{Type: fake.StepType, Name: name} }

func TestDefaults(t *testing.T) {
	t.Parallel()
	p := fake.New()
	ctx := context.Background()
	if r := p.Read(ctx, providers.ReadRequest{Type: fake.StepType, Addr: addr("a")}); r.Observation != providers.Absent {
		t.Errorf("Read before Apply = %v", r.Observation)
	}
	if d := p.Plan(ctx, providers.PlanRequest{Type: fake.StepType, Addr: addr("a"), Config: cfg("x", false)}).Diff; d != `value: "x"` {
		t.Errorf("diff %q", d)
	}
	sens := cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("secret").Mark(phases.SensitiveMark)})
	if d := p.Plan(ctx, providers.PlanRequest{Type: fake.StepType, Addr: addr("a"), Config: sens}).Diff; d != "value: "+phases.Redacted {
		t.Errorf("sensitive diff %q", d)
	}
	r := p.Apply(ctx, providers.ApplyRequest{Type: fake.StepType, Addr: addr("a"), Config: cfg("x", false)})
	if r.Diagnostics.HasErrors() || !r.Outputs.GetAttr("value").RawEquals(cty.StringVal("x")) || r.Revert.Description != "undo fake" {
		t.Errorf("Apply = %+v", r)
	}
	if o := p.Read(ctx, providers.ReadRequest{Type: fake.StepType, Addr: addr("a")}).Observation; o != providers.Present {
		t.Errorf("Read after Apply = %v", o)
	}
	if r := p.Apply(ctx, providers.ApplyRequest{Type: fake.StepType, Addr: addr("b"), Config: cfg("y", true)}); !r.Diagnostics.HasErrors() {
		t.Error("fail = true did not fail")
	}
	if o := p.Read(ctx, providers.ReadRequest{Type: fake.StepType, Addr: addr("b")}).Observation; o != providers.Absent {
		t.Errorf("Read after a failed Apply = %v", o)
	}
	if rr := p.Revert(ctx, providers.RevertRequest{Type: fake.StepType, Addr: addr("a")}); rr.Diagnostics.HasErrors() {
		t.Error(rr.Diagnostics.Err())
	}
	if o := p.Read(ctx, providers.ReadRequest{Type: fake.StepType, Addr: addr("a")}).Observation; o != providers.Absent {
		t.Errorf("Read after Revert = %v", o)
	}
	if p.Applied("fake_step.a") != 1 || p.Applied("fake_step.b") != 1 || p.Reverted("fake_step.a") != 1 {
		t.Errorf("counts: %v %v", p.ApplyCount, p.RevertCount)
	}
	if !p.ApplyCalled || !p.ReadCalled || !p.PlanCalled || !p.RevertCalled || p.ApplyRequest.Addr != addr("b") {
		t.Errorf("calls not recorded: %+v", p)
	}
}

func TestFnAndConcurrency(t *testing.T) {
	t.Parallel()
	p := fake.New()
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(10)
	p.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		started.Done()
		select {
		case <-release:
		case <-ctx.Done():
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Cancelled", "%v", ctx.Err())}
		}
		return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(req.Addr.Name)})}
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			p.Apply(context.Background(), providers.ApplyRequest{Type: fake.StepType, Addr: addr(fmt.Sprint(i % 3))})
		})
	}
	started.Wait() // all ten are inside ApplyFn at once: it runs without the lock
	close(release)
	wg.Wait()
	if got := p.Applied("fake_step.0") + p.Applied("fake_step.1") + p.Applied("fake_step.2"); got != 10 || len(p.Order()) != 10 {
		t.Errorf("applied %d times, order %v", got, p.Order())
	}
}
