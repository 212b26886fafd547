package runbooks_test

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

// A provider block may use step outputs: the references are recorded on
// the provider and become dependencies of every step it runs.
func TestProviderUsesStepOutputs(t *testing.T) {
	rb := mustLoad(t, map[string]string{"main.hcl": `
provider "talos" "node" {
  version   = "v1.13.3"
  endpoints = ["10.0.0.${exec.boot.exit_code}"]
}
phase "platform" {
  step "exec" "boot" { command = ["true"] }
  step "talos_kubeconfig" "k" {}
}
phase "apps" {
  step "talos_kubeconfig" "later" {}
  step "exec" "other" { command = ["true"] }
}
`}, runbooks.Options{})
	var pc *phases.ProviderConfig
	for _, p := range rb.Providers {
		if p.Key() == "talos.node" {
			pc = p
		}
	}
	if pc == nil {
		t.Fatal("no provider talos.node")
	}
	boot := phases.Address{Type: "exec", Name: "boot"}
	if len(pc.DependsOn) != 1 || pc.DependsOn[0] != boot {
		t.Fatalf("provider DependsOn = %v, want [exec.boot]", pc.DependsOn)
	}
	for _, addr := range []string{"talos_kubeconfig.k", "talos_kubeconfig.later"} {
		if deps := step(t, rb, addr).DependsOn; len(deps) != 1 || deps[0] != boot {
			t.Errorf("%s DependsOn = %v, want [exec.boot]", addr, deps)
		}
	}
	if deps := step(t, rb, "exec.other").DependsOn; len(deps) != 0 {
		t.Errorf("exec.other DependsOn = %v, want none: it is not run by talos.node", deps)
	}
	// The block is evaluated with the outputs known at the time.
	v, diags := pc.Config.Evaluate(map[phases.Address]cty.Value{boot: cty.ObjectVal(map[string]cty.Value{"exit_code": cty.NumberIntVal(7)})})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if got := v.GetAttr("endpoints").Index(cty.NumberIntVal(0)).AsString(); got != "10.0.0.7" {
		t.Errorf("endpoint = %q, want 10.0.0.7", got)
	}
	v, _ = pc.Config.Evaluate(nil)
	if v.GetAttr("endpoints").IsWhollyKnown() {
		t.Error("endpoints known before exec.boot ran")
	}
}

func TestProviderReferenceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, summary, line string
		detail                   []string
	}{
		{
			name: "undeclared step",
			src: `provider "talos" "node" {
  version   = "v1"
  endpoints = [exec.nope.exit_code]
}
phase "p" {
  step "exec" "boot" { command = ["true"] }
  step "talos_kubeconfig" "k" {}
}
`,
			summary: "Reference to Undeclared Step", line: "main.hcl:3",
			detail: []string{"exec.nope"},
		},
		{
			name: "step of a later phase",
			src: `provider "talos" "node" {
  version   = "v1"
  endpoints = [exec.boot.exit_code]
}
phase "first" {
  step "talos_kubeconfig" "k" {}
}
phase "second" {
  step "exec" "boot" { command = ["true"] }
}
`,
			summary: "Provider Configured from a Later Step", line: "main.hcl:3",
			detail: []string{"talos.node", "talos_kubeconfig.k", "exec.boot", `phase "first" runs first`},
		},
		{
			name: "its own step",
			src: `provider "talos" "node" {
  version = talos_kubeconfig.k.path
}
phase "p" {
  step "talos_kubeconfig" "k" {}
}
`,
			summary: "Dependency Cycle", line: "main.hcl:2",
			detail: []string{"talos_kubeconfig.k"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := load(t, map[string]string{"main.hcl": tc.src}, runbooks.Options{})
			expectDiag(t, diags, tc.summary, tc.line, tc.detail...)
		})
	}
}

// A step without a provider argument takes the only provider block of its
// type; with two or more, it must say which, and the error at the step
// names them all and the fix; with none, a provider that needs settings is
// an error, and one that needs none (local) is configured implicitly.
func TestImplicitProvider(t *testing.T) {
	const two = `provider "talos" "a" {
  version = "v1.13.3"
}
provider "talos" "b" {
  version = "v1.13.3"
}
`
	for _, tc := range []struct {
		name, src string
		want      map[string]string // step -> provider key
		summary   string            // the error expected, if any
		line      string
		detail    []string
	}{
		{
			name: "one block",
			src: `provider "talos" "node" {
  version = "v1.13.3"
}
phase "p" {
  step "talos_kubeconfig" "k" {}
  check "talos_read" "c" { path = "/x" }
  step "exec" "e" { command = ["true"] }
}
`,
			want: map[string]string{"talos_kubeconfig.k": "talos.node", "talos_read.c": "talos.node", "exec.e": "local.default"},
		},
		{
			name: "two blocks",
			src: two + `phase "p" {
  step "exec" "e" { command = ["true"] }
  step "talos_kubeconfig" "k" {}
}
`,
			summary: "Ambiguous Provider", line: "main.hcl:9,3",
			detail: []string{"step talos_kubeconfig.k", `"talos" provider`, "configures 2", "talos.a (main.hcl:1) and talos.b (main.hcl:4)", "Add provider = talos.a"},
		},
		{
			name: "two blocks, a check",
			src: two + `phase "p" {
  check "talos_read" "c" {
    path = "/x"
  }
}
`,
			summary: "Ambiguous Provider", line: "main.hcl:8,3",
			detail: []string{"check talos_read.c", "talos.a (main.hcl:1) and talos.b (main.hcl:4)", "to the check"},
		},
		{
			name: "none",
			src: `phase "p" {
  step "talos_kubeconfig" "k" {}
}
`,
			summary: "Missing Provider Configuration", line: "main.hcl:2,3",
			detail: []string{"talos_kubeconfig", `provider "talos" "NAME"`, "version"},
		},
		{
			name: "explicit",
			src: two + `phase "p" {
  step "talos_kubeconfig" "k" {
    provider = talos.b
  }
  step "exec" "e" {
    provider = local.default
    command  = ["true"]
  }
}
`,
			want: map[string]string{"talos_kubeconfig.k": "talos.b", "exec.e": "local.default"},
		},
		{
			name: "one of two named default",
			src: two + `provider "talos" "default" {
  version = "v1.13.3"
}
phase "p" {
  step "talos_kubeconfig" "k" {}
}
`,
			want: map[string]string{"talos_kubeconfig.k": "talos.default"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rb, diags := load(t, map[string]string{"main.hcl": tc.src}, runbooks.Options{})
			if tc.summary == "" {
				if diags.HasErrors() {
					t.Fatalf("unexpected errors: %s", diags.Err())
				}
				for addr, want := range tc.want {
					if got := step(t, rb, addr).Provider; got != want {
						t.Errorf("%s runs on %q, want %q", addr, got, want)
					}
				}
				return
			}
			if len(diags) != 1 || diags[0].Summary != tc.summary {
				t.Fatalf("want one %q, got %v", tc.summary, diags.Err())
			}
			d := diags[0]
			if d.Subject == nil || d.Subject.String() != tc.line {
				t.Errorf("subject = %v, want %s", d.Subject, tc.line)
			}
			for _, want := range tc.detail {
				if !strings.Contains(d.Detail, want) {
					t.Errorf("detail %q does not say %q", d.Detail, want)
				}
			}
		})
	}
}
