package local_test

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
)

// BenchmarkExecSpawn compares the provider's exec Apply with a bare
// exec.Command(...).Run() of the same argv. "interleaved" alternates the
// two in one loop, so both see the same machine load (the cores are
// shared), and reports their ratio; the engine's budget is 1.05.
//
//	go test -run '^$' -bench ExecSpawn -benchtime 2000x ./providers/local/
func BenchmarkExecSpawn(b *testing.B) {
	cfg := obj(map[string]cty.Value{"command": strs("sh", "-c", "true")})
	bare := func(b *testing.B) {
		if err := exec.Command("sh", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	provider := func(p *local.Provider) func(b *testing.B) {
		return func(b *testing.B) {
			if r := apply(context.Background(), p, "exec", "bench", cfg, io.Discard); r.Diagnostics.HasErrors() {
				b.Fatal(r.Diagnostics.Err())
			}
		}
	}
	newP := func(pidns bool) *local.Provider {
		p := benchConfigured(local.New())
		if !pidns {
			local.WithoutPIDNamespace(p)
		}
		return p
	}
	loop := func(f func(*testing.B)) func(*testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				f(b)
			}
		}
	}
	b.Run("bare", loop(bare))
	b.Run("provider", loop(provider(newP(true))))
	b.Run("provider_pgroup", loop(provider(newP(false))))
	for _, mode := range []struct {
		name  string
		pidns bool
	}{{"interleaved", true}, {"interleaved_pgroup", false}} {
		b.Run(mode.name, func(b *testing.B) {
			prov := provider(newP(mode.pidns))
			var tb, tp time.Duration
			for i := 0; b.Loop(); i++ {
				// Alternate which goes first, so neither always pays for
				// the other's cleanup.
				first, second := bare, prov
				if i%2 == 1 {
					first, second = prov, bare
				}
				t0 := time.Now()
				first(b)
				t1 := time.Now()
				second(b)
				t2 := time.Now()
				if i%2 == 0 {
					tb, tp = tb+t1.Sub(t0), tp+t2.Sub(t1)
				} else {
					tp, tb = tp+t1.Sub(t0), tb+t2.Sub(t1)
				}
			}
			b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bare-ns/op")
			b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "provider-ns/op")
			b.ReportMetric(float64(tp)/float64(tb), "ratio")
		})
	}
}

// BenchmarkWaitZero is the per-step cost of a wait step of "0s", which the
// engine's checkpoint benchmark runs 10,000 times.
func BenchmarkWaitZero(b *testing.B) {
	p := benchConfigured(local.New())
	cfg := obj(map[string]cty.Value{"duration": cty.StringVal("0s")})
	b.ReportAllocs()
	for b.Loop() {
		if r := apply(context.Background(), p, "wait", "z", cfg, nil); r.Diagnostics.HasErrors() {
			b.Fatal(r.Diagnostics.Err())
		}
	}
}

// benchConfigured configures p as the engine does before any step.
func benchConfigured(p *local.Provider) *local.Provider {
	p.Configure(context.Background(), providers.ConfigureRequest{Name: "local", Config: cty.EmptyObjectVal})
	return p
}
