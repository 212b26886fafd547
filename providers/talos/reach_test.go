package talos_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// Endpoints where nothing listens: the first step to find them says which
// node, at which endpoint, where that endpoint comes from and what to
// check; the steps after it say in one line that it did not answer,
// pointing at that step, instead of the gRPC client's dial trace.
func TestUnreachableNode(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := l.provider(t, map[string]cty.Value{"endpoints": strs(dead)})

	one := func(what string, d phases.Diagnostics) phases.Diagnostic {
		t.Helper()
		if len(d) != 1 || d[0].Severity != phases.Error {
			t.Fatalf("%s: want one error, got %v", what, d)
		}
		if d[0].Summary != "Cannot Reach Talos" {
			t.Errorf("%s: summary %q", what, d[0].Summary)
		}
		return d[0]
	}
	first := one("the machine config's plan", plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})).Diagnostics)
	for _, want := range []string{
		"talos_machine_config.node cannot reach the Talos API of node", "at " + dead + ": dial tcp " + dead, "connection refused",
		`the endpoints of the talos provider block "node"`, "Check that the node is up", "the address is right",
	} {
		if !strings.Contains(first.Detail, want) {
			t.Errorf("the first step's error lacks %q:\n%s", want, first.Detail)
		}
	}
	if strings.Contains(first.Detail, "transport: Error while dialing") {
		t.Errorf("the first step's error is the gRPC client's:\n%s", first.Detail)
	}
	for _, typ := range []string{talos.Bootstrap, talos.Kubeconfig, talos.Read, talos.Upgrade} {
		cfg := map[string]cty.Value{}
		switch typ {
		case talos.Kubeconfig:
			cfg["path"] = cty.StringVal("kubeconfig.age")
		case talos.Read:
			cfg["path"] = cty.StringVal("/etc/hostname")
		case talos.Upgrade:
			cfg["version"] = cty.StringVal("v1.13.3")
		}
		d := one(typ, apply(context.Background(), p, typ, obj(cfg), &bytes.Buffer{}).Diagnostics)
		want := fmt.Sprintf("%s.node: the Talos API at %s did not answer (see talos_machine_config.node).", typ, dead)
		if d.Detail != want {
			t.Errorf("%s: %s\nwant %s", typ, d.Detail, want)
		}
	}
}
