package talos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// Kubeconfig is the talos_kubeconfig step type.
const Kubeconfig = "talos_kubeconfig"

// kubeconfigAttrs is a talos_kubeconfig step.
type kubeconfigAttrs struct {
	Path string `cty:"path" required:"true" doc:"Where to write the kubeconfig (mode 0600), relative to the runbook. It holds the cluster's admin key: a path ending in .age is written age-encrypted to the runbook's .age-recipients (the helm provider opens it in memory with MIGRATE_AGE_IDENTITY); a plain path inside the runbook's directory is refused, since a copy of the runbook would carry the key in clear."`
}

// kubeconfigOutputs are a talos_kubeconfig step's outputs.
type kubeconfigOutputs struct {
	Path string `cty:"path"`
}

var kubeconfigStep = &sdk.StepType[*Provider, kubeconfigAttrs, none, none]{
	Name:        Kubeconfig,
	Description: "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps: age-encrypted when its path ends in .age, never in clear inside the runbook.",
	Rollback:    "Removes the file.",
	Outputs:     kubeconfigOutputs{},
	Unknowns:    true, // the plan names the path known after apply
	Validate: func(c *handle, a *kubeconfigAttrs) phases.Diagnostics {
		if c.Unknown("path") {
			return nil
		}
		if a.Path == "" {
			return missing(c, "path")
		}
		return inClear(c, a.Path)
	},
	Read: func(_ context.Context, c *handle, a kubeconfigAttrs, prior *sdk.Prior[none, none]) sdk.Read[none] {
		if c.Unknown("path") {
			return sdk.Read[none]{Observation: providers.Unknown}
		}
		if _, err := os.Stat(c.Settings.s.abs(a.Path)); err != nil {
			return sdk.Read[none]{Observation: providers.Absent, Detail: "the kubeconfig file is gone"}
		}
		r := sdk.Read[none]{Observation: providers.Present, Outputs: kubeconfigOutputs{Path: a.Path}}
		if prior == nil || prior.Revert == nil {
			// Never recorded (a run killed after the file was written,
			// before its Apply returned): its undo is rebuilt from the
			// config, so that the step adopted is still rolled back.
			r.Revert = kubeconfigRevert(a.Path)
		}
		return r
	},
	Plan: func(_ context.Context, c *handle, a kubeconfigAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		how := "mode 0600"
		if sealed(a.Path) {
			if _, err := agefile.RunbookRecipients(c.Settings.s.dir); err != nil {
				return sdk.Plan[none]{Diagnostics: phases.Errorf("Cannot Encrypt Kubeconfig", "%s writes the kubeconfig age-encrypted (%s), but %v.", c.Addr, a.Path, err)}
			}
			how = "age-encrypted to the runbook's " + agefile.RecipientsFile + ", mode 0600"
		}
		return sdk.Plan[none]{
			Diff:    fmt.Sprintf("write the cluster's kubeconfig, fetched from %s, to %s (%s)", strings.Join(c.Settings.targets(), ", "), a.Path, how),
			Outputs: kubeconfigOutputs{Path: a.Path}, // known now: the helm steps after it know which cluster they judge
		}
	},
	Apply: func(ctx context.Context, sc *handle, a kubeconfigAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		c := newCall(sc)
		if d := fetchKubeconfig(ctx, c, a.Path); d.HasErrors() {
			return sdk.Apply[none, none]{Diagnostics: d}
		}
		if sealed(a.Path) {
			c.log.Printf("kubeconfig written, age-encrypted (mode 0600)")
		} else {
			c.log.Printf("kubeconfig written (mode 0600)")
		}
		return sdk.Apply[none, none]{Outputs: kubeconfigOutputs{Path: a.Path}, Revert: kubeconfigRevert(a.Path)}
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

// kubeconfigRevert is the undo of a kubeconfig written at path (as the
// runbook names it).
func kubeconfigRevert(path string) *sdk.RevertData[none] {
	return &sdk.RevertData[none]{Description: "remove the kubeconfig file " + path}
}

// fetchKubeconfig fetches the kubeconfig and writes it at name (as the
// runbook names it), its undo saved in the step's record first.
func fetchKubeconfig(ctx context.Context, c *call, name string) phases.Diagnostics {
	path := c.s.abs(name)
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
	if sealed(path) {
		rs, err := agefile.RunbookRecipients(c.s.dir)
		if err != nil {
			return phases.Errorf("Cannot Encrypt Kubeconfig", "%s writes the kubeconfig age-encrypted, but %v.", c.addr, err)
		}
		if b, err = agefile.Encrypt(b, true, rs...); err != nil {
			return phases.Errorf("Cannot Encrypt Kubeconfig", "Encrypting the kubeconfig: %v.", err)
		}
	}
	if err := sdk.Intend(c.Call, kubeconfigRevert(name)); err != nil {
		return phases.Errorf("Cannot Record The Kubeconfig", "%s: the kubeconfig's removal could not be recorded in the state before the file is written (%v); nothing was written.", c.addr, err)
	}
	if err := writePrivate(path, b); err != nil {
		return phases.Errorf("Cannot Write Kubeconfig", "Writing the kubeconfig: %v.", err)
	}
	return nil
}

// sealed: the kubeconfig is written age-encrypted.
func sealed(path string) bool { return strings.HasSuffix(path, agefile.Ext) }

// inClear refuses a kubeconfig written in clear inside the runbook's
// directory: its admin key would travel with every copy of the runbook
// (git-ignored only where someone thought of it).
func inClear(c *handle, path string) phases.Diagnostics {
	if c.Settings == nil || c.Settings.s == nil {
		return nil
	}
	dir := c.Settings.s.dir
	if sealed(path) || dir == "" {
		return nil
	}
	rel, err := filepath.Rel(dir, c.Settings.s.abs(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil
	}
	return phases.Errorf("Kubeconfig In Clear", "%s would write the cluster's admin key in clear inside the runbook (%s). Name an age file (path = %q: encrypted to the runbook's %s, opened in memory by the helm provider) or a path outside the runbook's directory.", c.Addr, path, path+agefile.Ext, agefile.RecipientsFile)
}
