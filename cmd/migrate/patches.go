package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
	"github.com/homelab-migrate/migrate/views"
)

func (a *app) patchesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "patches",
		Short: "Work on the runbook's Talos machine-config patches",
	}
	cmd.AddCommand(a.patchesUpgradeCommand())
	return cmd
}

type patchesUpgradeFlags struct {
	to           string
	write, force bool
}

func (a *app) patchesUpgradeCommand() *cobra.Command {
	var f patchesUpgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade --to VERSION [FILE...]",
		Short: "Rewrite Talos patches into a release's documents",
		Long: `Rewrite Talos machine-config patches for the release VERSION: the
v1alpha1 keys that release keeps in typed documents (since Talos 1.14:
machine.kubelet -> KubeletConfig, cluster.allowSchedulingOnControlPlanes ->
KubeNodeConfig, machine.install -> UnattendedInstallConfig, ...) are moved
into those documents, as the talos provider's plan shows. FILEs are relative
to the runbook directory (default: its patches/*.yaml).

Without --write it prints each rewrite as a diff and writes nothing. With
--write it replaces each file that changes and keeps the old one beside it
as FILE.orig; it refuses, writing nothing, when a FILE.orig exists, unless
--force. Keys it cannot move stay in the file, named with what to do.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runPatchesUpgrade(cmd.Context(), f, args)
		},
	}
	cmd.Flags().StringVar(&f.to, "to", "", "the Talos `VERSION` to write the patches for, such as v1.14.7 (required)")
	cmd.Flags().BoolVar(&f.write, "write", false, "write the rewritten patches (the old kept as FILE.orig)")
	cmd.Flags().BoolVar(&f.force, "force", false, "with --write: replace a FILE.orig left by an earlier rewrite")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func (a *app) runPatchesUpgrade(ctx context.Context, f patchesUpgradeFlags, names []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	names, err := patchFiles(a.runbookDir, names)
	if err != nil {
		return err
	}
	upgrade, err := a.patchUpgrader(ctx, f.to, true)
	if err != nil {
		return err
	}
	report := views.PatchesReport{To: f.to, Write: f.write}
	type pending struct {
		path     string
		old, new []byte
	}
	var todo []pending
	for _, name := range names {
		path := filepath.Join(a.runbookDir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading the patch: %w", err)
		}
		u, err := upgrade(name, data)
		if err != nil {
			return err
		}
		report.Files = append(report.Files, views.PatchFileReport{Name: name, Diff: u.Diff, Moved: u.Moved, Left: u.Left})
		if u.Diff != "" {
			todo = append(todo, pending{path, data, u.New})
		}
	}
	if f.write {
		// Every refusal before anything is written.
		for _, p := range todo {
			if _, err := os.Lstat(p.path + ".orig"); err == nil && !f.force {
				return fmt.Errorf("%s.orig exists (an earlier rewrite's copy?): move it away, or pass --force to replace it; nothing was written", p.path)
			}
		}
		for _, p := range todo {
			if err := rewritePatch(p.path, p.old, p.new); err != nil {
				return err
			}
		}
	}
	a.view().PatchesUpgrade(report)
	return nil
}

// patchUpgrader rewrites patches for the release to through the talos
// program (package talospatch): migrate does not carry Talos's libraries.
// warn says an unverified program (one migrate has no sum of) is to be
// told; migrate init has told it already.
func (a *app) patchUpgrader(ctx context.Context, to string, warn bool) (func(name string, data []byte) (talosschema.PatchUpgrade, error), error) {
	prog := talosPlugin()
	found, err := plugin.Check(prog)
	if err != nil {
		return nil, err
	}
	if warn {
		a.view().UnverifiedProgram(found)
	}
	return func(name string, data []byte) (talosschema.PatchUpgrade, error) {
		var u talosschema.PatchUpgrade
		out, err := plugin.Run(ctx, prog, data, talosschema.UpgradePatchArg, to, name)
		if err != nil {
			return u, fmt.Errorf("rewriting %s for Talos %s: %w", name, to, err)
		}
		if err := json.Unmarshal(out, &u); err != nil {
			return u, fmt.Errorf("rewriting %s: the talos program's answer: %w", name, err)
		}
		return u, nil
	}, nil
}

// patchFiles are the names given, or the runbook's patches/*.yaml.
func patchFiles(dir string, names []string) ([]string, error) {
	if len(names) > 0 {
		return names, nil
	}
	var found []string
	for _, glob := range []string{"patches/*.yaml", "patches/*.yml"} {
		m, err := fs.Glob(os.DirFS(dir), glob)
		if err != nil {
			return nil, err
		}
		found = append(found, m...)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no patches/*.yaml in the runbook directory %s: name the patch files", dir)
	}
	slices.Sort(found)
	return found, nil
}

// rewritePatch keeps the old patch as PATH.orig, then replaces PATH
// (same mode) through a temporary file renamed over it, so that it is
// never seen half written.
func rewritePatch(path string, old, data []byte) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".orig", old, info.Mode().Perm()); err != nil {
		return fmt.Errorf("keeping the old patch: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Sync(), tmp.Chmod(info.Mode().Perm()), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
