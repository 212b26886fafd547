package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/state"
)

// varFlags are the variable options of the commands that load a runbook.
type varFlags struct {
	vars, files []string
	// optional: a command that only reads the runbook's shape or the state
	// (validate, graph, status) needs its phases and steps, not the values
	// of its variables: those without one stay unknown.
	optional bool
}

func (f *varFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.vars, "var", nil, "set a variable: `NAME=VALUE` (repeatable); MIGRATE_VAR_NAME in the environment works too")
	cmd.Flags().StringArrayVar(&f.files, "var-file", nil, "read variables from an HCL `FILE` of NAME = VALUE lines (repeatable)")
}

func (a *app) dir() (string, error) {
	d, err := filepath.Abs(a.runbookDir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(d)
	if err != nil {
		return "", fmt.Errorf("runbook directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("runbook directory %s is not a directory", d)
	}
	return d, nil
}

func (a *app) stateDir() (string, error) {
	if a.statePath != "" {
		return filepath.Abs(a.statePath)
	}
	d, err := a.dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, ".migrate"), nil
}

// schemas are the registry's providers' schemas (compiled in: no
// program is started).
func schemas() map[string]phases.Schema {
	out := map[string]phases.Schema{}
	for name, f := range registry() {
		out[name] = f().Schema()
	}
	return out
}

// load reads the runbook and prints its diagnostics; an error means the
// runbook cannot be used (and was reported).
func (a *app) load(vf varFlags) (*phases.Runbook, error) {
	dir, err := a.dir()
	if err != nil {
		return nil, err
	}
	limitMemory(dir)
	ld := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{
		Dir:      dir,
		Schemas:  schemas(),
		Vars:     vf.vars,
		VarFiles: vf.files,
		Environ:  os.Environ(),

		UnsetVarsUnknown: vf.optional,
	})
	rb, diags := ld.Load()
	if a.etcdPassword != "" {
		rb.Secrets = append(rb.Secrets, a.etcdPassword)
	}
	// Diagnostics pass the scrubber the engine uses for everything else.
	scrub := &secret.Scrubber{}
	scrub.Add(rb.Secrets...)
	a.view().SetScrubber(scrub.Text)
	a.view().SetFiles(ld.Files())
	a.view().Diagnostics(diags)
	if diags.HasErrors() {
		return nil, reported(exitError)
	}
	a.logger().Debug("runbook loaded", "dir", dir, "phases", len(rb.Phases))
	return rb, nil
}

// engine makes the engine and prints its diagnostics.
func (a *app) engine(ctx context.Context, rb *phases.Runbook, st state.Manager, parallelism int, lg *state.Log, hooks ...engine.Hook) (*engine.Engine, error) {
	e, diags := engine.New(ctx, engine.Options{
		Runbook:     rb,
		Factories:   registry(),
		State:       st,
		Hooks:       hooks,
		Parallelism: parallelism,
		Log:         lg,
		InputKey:    inputKey(),
		StateDir:    a.filesDir(rb),
	})
	a.view().Diagnostics(diags)
	if diags.HasErrors() {
		return nil, reported(exitError)
	}
	return e, nil
}
