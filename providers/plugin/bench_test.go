package plugin_test

import (
	"context"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

// BenchmarkStartAndCall: a program's start, handshake and first call,
// then (CallOnly) one call through the pipe of a running program.
func BenchmarkStartAndCall(b *testing.B) {
	cfg := cty.ObjectVal(map[string]cty.Value{"endpoint": cty.StringVal("x")})
	for b.Loop() {
		p := plugin.Factory(program(b))()
		if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake", Config: cfg}); r.Diagnostics.HasErrors() {
			b.Fatal(r.Diagnostics.Err())
		}
		p.(providers.Closer).Close()
	}
}

func BenchmarkCallOnly(b *testing.B) {
	p := plugin.Factory(program(b))()
	defer p.(providers.Closer).Close()
	p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake", Config: cty.ObjectVal(map[string]cty.Value{"endpoint": cty.StringVal("x")})})
	for b.Loop() {
		if r := apply(context.Background(), p, "v", nil); r.Diagnostics.HasErrors() {
			b.Fatal(r.Diagnostics.Err())
		}
	}
}
