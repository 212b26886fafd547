package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/reference"
	"github.com/homelab-migrate/migrate/views"
)

// defaultReference is where migrate docs writes, relative to the
// repository's root.
const defaultReference = "docs/reference.md"

func (a *app) docsCommand() *cobra.Command {
	var out string
	var check bool
	cmd := &cobra.Command{
		Use:   "docs",
		Short: "Write the reference of every block and step type, and of the --json events (docs/reference.md)",
		Long: `Write the reference of the runbook language and of every provider's
blocks and step types, generated from the schemas compiled into migrate
(the ones validate checks runbooks against; no provider program starts).
With --check, write nothing and fail when the file differs.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return writeReference(out, check)
		},
	}
	cmd.Flags().StringVar(&out, "out", defaultReference, "the Markdown `FILE` to write")
	cmd.Flags().BoolVar(&check, "check", false, "compare FILE with the reference instead of writing it")
	return cmd
}

// referenceText generates the reference from the registry's schemas,
// and the events' from the engine's list of them.
func referenceText() ([]byte, error) {
	schemas := map[string]phases.Schema{}
	for name, f := range registry() {
		schemas[name] = f().Schema()
	}
	var b bytes.Buffer
	if err := reference.Write(&b, schemas); err != nil {
		return nil, err
	}
	err := reference.WriteEvents(&b, eventFields(), eventKinds())
	return b.Bytes(), err
}

func eventFields() []reference.Field {
	var out []reference.Field
	for _, f := range views.EventFields {
		out = append(out, reference.Field{Name: f.Name, Says: f.Says})
	}
	return out
}

func eventKinds() []reference.Event {
	var out []reference.Event
	for _, k := range views.EventKinds {
		out = append(out, reference.Event{Kind: string(k.Kind), Says: k.Says, Fields: k.Fields})
	}
	return out
}

func writeReference(out string, check bool) error {
	want, err := referenceText()
	if err != nil {
		return err
	}
	if check {
		got, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if !bytes.Equal(got, want) {
			run := "migrate docs"
			if out != defaultReference {
				run += " --out " + out
			}
			return fmt.Errorf("%s is out of date: run %s", out, run)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, want, 0o644)
}
