package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree describes every file, directory and link under dir: path, mode,
// modification time, and a file's bytes or a link's target. Two trees are
// equal when nothing under dir was created, removed, rewritten or touched.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		line := fmt.Sprintf("%s %v %d", rel, fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffTrees lists what differs between two trees, for failure messages.
func diffTrees(before, after []string) string {
	var b strings.Builder
	for _, l := range before {
		if !slices.Contains(after, l) {
			fmt.Fprintf(&b, "- %.200s\n", l)
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			fmt.Fprintf(&b, "+ %.200s\n", l)
		}
	}
	return b.String()
}

// A command that refuses, or finds nothing to do, leaves the runbook
// directory exactly as it was: no .migrate/ made where there was none, no
// lock, no log, no state rewritten where there was one. Each case is the
// command, its exit code and what its output must say.
func TestRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	// A plan made for another state: that of another runbook directory.
	elsewhere := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, elsewhere, 0, "run", "--phase", "A", "--auto-approve")
	otherPlan := filepath.Join(t.TempDir(), "other.plan")
	run(t, elsewhere, 0, "plan", "--out", otherPlan)

	type refusal struct {
		args []string
		code int
		want []string
	}
	common := []refusal{
		{[]string{"run", "--phase", "nope", "--auto-approve"}, 1, []string{`no phase named "nope"; the runbook has: A, B`}},
		{[]string{"run", "--all"}, 1, []string{"stdin is not a terminal", "--auto-approve"}},
		{[]string{"run", "--all", "--parallelism", "0"}, 1, []string{"--parallelism must be at least 1"}},
		{[]string{"run", "--all", "--bogus"}, 1, []string{"unknown flag: --bogus"}},
		{[]string{"run", "--all", "--auto-approve", "--approve", "not-an-address"}, 1, []string{"--approve"}},
		{[]string{"run", "--plan", filepath.Join(t.TempDir(), "missing.plan")}, 1, []string{"reading the plan", "missing.plan"}},
		{[]string{"rollback", "--phase", "nope", "--auto-approve"}, 1, []string{`no phase named "nope"`}},
		{[]string{"plan", "--phase", "nope"}, 1, []string{`no phase named "nope"`}},
		{[]string{"plan"}, 0, []string{"Plan:"}},
		{[]string{"status"}, 0, []string{"A"}},
		{[]string{"validate"}, 0, []string{"The runbook is valid"}},
		{[]string{"graph"}, 0, nil},
	}
	fresh := append(slices.Clone(common),
		refusal{[]string{"run", "--phase", "B", "--auto-approve"}, 1, []string{"phase B runs after A, which is not complete", "migrate run --phase A"}},
		refusal{[]string{"run", "--plan", otherPlan}, 1, []string{"refusing the plan " + otherPlan, "there is no state here yet",
			"run it with the state it was made for", "nothing was changed"}},
		refusal{[]string{"rollback", "--auto-approve"}, 0, []string{"Nothing to roll back."}},
	)
	// A state where phase A ran, with a plan made before it did.
	existing := func(t *testing.T) (dir, stale string) {
		dir = runbook(t, map[string]string{"main.hcl": twoPhases})
		stale = filepath.Join(t.TempDir(), "stale.plan")
		run(t, dir, 0, "plan", "--out", stale)
		run(t, dir, 0, "run", "--phase", "A", "--auto-approve")
		return dir, stale
	}
	withState := append(slices.Clone(common),
		refusal{[]string{"run", "--plan", otherPlan}, 1, []string{"refusing the plan " + otherPlan, "made for another state", "nothing was changed"}},
		refusal{[]string{"run", "--phase", "A", "--auto-approve"}, 0, []string{"Nothing to run"}},
		refusal{[]string{"run", "--phase", "B"}, 1, []string{"stdin is not a terminal"}},
		refusal{[]string{"rollback", "--phase", "A"}, 1, []string{"stdin is not a terminal"}},
	)

	check := func(t *testing.T, dir string, c refusal) {
		t.Helper()
		before := tree(t, dir)
		r := run(t, dir, c.code, c.args...)
		for _, want := range c.want {
			if !strings.Contains(r.stdout+r.stderr, want) {
				t.Errorf("migrate %v does not say %q:\n%s", c.args, want, r)
			}
		}
		if after := tree(t, dir); !slices.Equal(before, after) {
			t.Errorf("migrate %v changed the runbook directory:\n%s", c.args, diffTrees(before, after))
		}
	}
	for _, c := range fresh {
		t.Run("no state/"+strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			dir := runbook(t, map[string]string{"main.hcl": twoPhases})
			check(t, dir, c)
			if _, err := os.Stat(filepath.Join(dir, ".migrate")); !os.IsNotExist(err) {
				t.Errorf("migrate %v made .migrate/: %v", c.args, err)
			}
		})
	}
	t.Run("state/stale plan", func(t *testing.T) {
		t.Parallel()
		dir, stale := existing(t)
		check(t, dir, refusal{[]string{"run", "--plan", stale}, 1, []string{"the state changed since the plan was made", "make a new plan", "nothing was changed"}})
	})
	for _, c := range withState {
		t.Run("state/"+strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			dir, _ := existing(t)
			check(t, dir, c)
		})
	}
}

// state push and pull refuse a source without a state, and a target of
// another lineage, before either state is opened for writing: neither is
// created nor changed.
func TestStateCopyRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	empty := runbook(t, map[string]string{"main.hcl": twoPhases})
	target := filepath.Join(t.TempDir(), "target")
	before := tree(t, empty)
	r := run(t, empty, 1, "state", "push", "--to", "local:"+target)
	for _, want := range []string{"there is no state in " + filepath.Join(empty, ".migrate") + " to copy", "nothing was changed"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("push of no state does not say %q: %s", want, r)
		}
	}
	if after := tree(t, empty); !slices.Equal(before, after) {
		t.Errorf("push of no state changed the runbook directory:\n%s", diffTrees(before, after))
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("push of no state made its target: %v", err)
	}
	run(t, empty, 1, "--backend", "local:"+target, "state", "pull", "--from", "local:"+filepath.Join(t.TempDir(), "none"))
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("pull of no state made the target: %v", err)
	}

	one := runbook(t, map[string]string{"main.hcl": twoPhases})
	two := runbook(t, map[string]string{"main.hcl": twoPhases})
	run(t, one, 0, "run", "--phase", "A", "--auto-approve")
	run(t, two, 0, "run", "--phase", "A", "--auto-approve")
	b1, b2 := tree(t, one), tree(t, two)
	r = run(t, one, 1, "state", "push", "--to", "local:"+filepath.Join(two, ".migrate"))
	if !strings.Contains(r.stderr, "another state (lineage") || !strings.Contains(r.stderr, "nothing was changed") {
		t.Errorf("push over another lineage: %s", r)
	}
	if a1, a2 := tree(t, one), tree(t, two); !slices.Equal(b1, a1) || !slices.Equal(b2, a2) {
		t.Errorf("a refused push changed a state:\n%s%s", diffTrees(b1, a1), diffTrees(b2, a2))
	}
}

// A symbolic link cycle under charts/ fails validate, and plan, with one
// diagnostic naming the link and where it leads, before anything follows
// it: plan printed Helm's line per level of the cycle (15 KB) before.
func TestLinkCycleRefused(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
provider "helm" "cluster" { kubeconfig = "secrets/kubeconfig" }
phase "apps" {
  step "helm_release" "app" {
    provider  = helm.cluster
    chart     = "charts/app"
    namespace = "media"
  }
}
`})
	templates := filepath.Join(dir, "charts", "app", "templates")
	if err := os.MkdirAll(templates, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "charts", "app", "Chart.yaml"), []byte("apiVersion: v2\nname: app\nversion: 0.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(templates, "loop")); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "plan"} {
		r := run(t, dir, 1, cmd)
		for _, want := range []string{"Symbolic Link Cycle", "charts/app/templates/loop (-> ..)", "it leads to charts/app, a directory that holds it", "Remove the link"} {
			if !strings.Contains(strings.Join(strings.Fields(r.stderr), " "), want) {
				t.Errorf("%s does not say %q: %s", cmd, want, r)
			}
		}
		if out := r.stdout + r.stderr; len(out) > 1000 || strings.Count(out, "\n") > 12 || strings.Contains(out, "found symbolic link") {
			t.Errorf("%s prints %d bytes in %d lines:\n%s", cmd, len(out), strings.Count(out, "\n"), out)
		}
	}
}
