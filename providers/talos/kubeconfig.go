package talos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Kubeconfig is the talos_kubeconfig step type.
const Kubeconfig = "talos_kubeconfig"

// kubeconfigAttrs is a talos_kubeconfig step.
type kubeconfigAttrs struct {
	Path string `cty:"path" required:"true" doc:"Where to write the kubeconfig, relative to the runbook."`
}

// kubeconfigOutputs are a talos_kubeconfig step's outputs.
type kubeconfigOutputs struct {
	Path string `cty:"path"`
}

var kubeconfigStep = &sdk.StepType[*Provider, kubeconfigAttrs, none, none]{
	Name:        Kubeconfig,
	Description: "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps.",
	Rollback:    "Removes the file.",
	Outputs:     kubeconfigOutputs{},
	Unknowns:    true, // the plan names the path known after apply
	Validate: func(c *handle, a *kubeconfigAttrs) phases.Diagnostics {
		if a.Path == "" {
			return missing(c, "path")
		}
		return nil
	},
	Read: func(_ context.Context, c *handle, a kubeconfigAttrs, _ *sdk.Prior[none, none]) sdk.Read[none] {
		if c.Unknown("path") {
			return sdk.Read[none]{Observation: providers.Unknown}
		}
		if _, err := os.Stat(c.Settings.s.abs(a.Path)); err != nil {
			return sdk.Read[none]{Observation: providers.Absent, Detail: "the kubeconfig file is gone"}
		}
		return sdk.Read[none]{Observation: providers.Present, Outputs: kubeconfigOutputs{Path: a.Path}}
	},
	Plan: func(_ context.Context, c *handle, a kubeconfigAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		return sdk.Plan[none]{Diff: fmt.Sprintf("write the cluster's kubeconfig, fetched from %s, to %s (mode 0600)", strings.Join(c.Settings.targets(), ", "), a.Path)}
	},
	Apply: func(ctx context.Context, sc *handle, a kubeconfigAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		c := newCall(sc)
		if d := fetchKubeconfig(ctx, c, c.s.abs(a.Path)); d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		c.log.Printf("kubeconfig written (mode 0600)")
		return sdk.Apply[none, none]{
			Outputs: kubeconfigOutputs{Path: a.Path},
			Revert:  &sdk.RevertData[none]{Description: "remove the kubeconfig file " + a.Path},
		}
	},
	Revert: func(_ context.Context, c *handle, a kubeconfigAttrs, _ sdk.Applied[none]) phases.Diagnostics {
		if a.Path == "" || c.Unknown("path") {
			return missing(c, "path")
		}
		if err := os.Remove(c.Settings.s.abs(a.Path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return phases.Errorf("Cannot Remove Kubeconfig", "Removing the kubeconfig: %v.", err)
		}
		return nil
	},
}

// missing is the diagnostic of a required attribute left empty.
func missing(c *handle, name string) phases.Diagnostics {
	return phases.Errorf("Missing Required Attribute", "The %q attribute of %s is required.", name, c.Addr)
}

func fetchKubeconfig(ctx context.Context, c *call, path string) phases.Diagnostics {
	ns, d := c.guarded(ctx)
	if d.HasErrors() {
		return d
	}
	n := ns[0]
	kctx, cancel := bounded(ctx)
	defer cancel()
	b, err := n.c.Kubeconfig(n.at(kctx))
	if err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Cannot Fetch Kubeconfig", "Node %s did not give the kubeconfig: %v. Is the cluster bootstrapped (talos_bootstrap)?", n.name, apiErr("Kubeconfig", err))
	}
	if err := writePrivate(path, b); err != nil {
		return phases.Errorf("Cannot Write Kubeconfig", "Writing the kubeconfig: %v.", err)
	}
	return nil
}
