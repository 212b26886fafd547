package runbooks_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

const linksRunbook = `phase "p" {
  step "exec" "a" { command = ["true"] }
}
`

// linked makes a runbook directory with main.hcl, the directories dirs
// and the links (path -> target), and loads it through os.DirFS.
func linked(t *testing.T, dirs []string, links map[string]string) (string, phases.Diagnostics) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(linksRunbook), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		target = strings.ReplaceAll(target, "$DIR", dir)
		if err := os.Symlink(target, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	_, diags := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{Dir: dir, Schemas: testSchemas()}).Load()
	return dir, diags
}

// TestLinkCycles: a link that leads back into a directory holding it,
// directly or through other links, or links that lead to one another,
// is an error naming the link, where it leads and what to do; each cycle
// is told once.
func TestLinkCycles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		dirs  []string
		links map[string]string
		want  []string
	}{
		{"to its parent", []string{"charts/app/templates"}, map[string]string{"charts/app/templates/loop": ".."},
			[]string{"The link charts/app/templates/loop (-> ..) makes a cycle: it leads to charts/app, a directory that holds it.", "Remove the link"}},
		{"to the runbook's root", []string{"charts"}, map[string]string{"charts/root": ".."},
			[]string{"The link charts/root (-> ..) makes a cycle: it leads to the runbook directory itself"}},
		{"to itself by an absolute path", []string{"charts"}, map[string]string{"charts/self": "$DIR/charts"},
			[]string{"The link charts/self (-> ", "it leads to charts, a directory that holds it"}},
		{"through another link", []string{"a", "b"}, map[string]string{"a/to-b": "../b", "b/to-a": "../a"},
			[]string{"makes a cycle: it leads back to", "through "}},
		{"links to one another", nil, map[string]string{"one": "two", "two": "one"},
			[]string{"makes a cycle: its links lead to one another: "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, diags := linked(t, c.dirs, c.links)
			var found []phases.Diagnostic
			for _, d := range diags {
				if d.Summary == "Symbolic Link Cycle" {
					found = append(found, d)
				}
			}
			if len(found) != 1 || found[0].Severity != phases.Error {
				t.Fatalf("want one Symbolic Link Cycle error, got %v", diags)
			}
			for _, w := range c.want {
				if !strings.Contains(found[0].Detail, w) {
					t.Errorf("the diagnostic lacks %q:\n%s", w, found[0].Detail)
				}
			}
		})
	}
}

// TestLinksOut: a link that leads out of the runbook directory, by a
// relative or an absolute path, is an error naming the link and where it
// leads; links inside it (relative or absolute), dangling ones and hidden
// entries are fine.
func TestLinksOut(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	dir, diags := linked(t, []string{"charts/app", "secrets", ".git"}, map[string]string{
		"charts/shared":  "../../elsewhere",
		"secrets/keys":   outside,
		"charts/current": "app",
		"charts/abs":     "$DIR/charts/app",
		"notes.txt":      "main.hcl",
		"dangling":       "nothing-here",
		".git/loop":      "..",
	})
	var out []string
	for _, d := range diags {
		switch d.Summary {
		case "Link Leads Out of the Runbook":
			out = append(out, d.Detail)
		case "Symbolic Link Cycle":
			t.Errorf("a cycle where there is none: %s", d.Detail)
		}
	}
	if len(out) != 2 {
		t.Fatalf("want two links out, got %v", diags)
	}
	joined := strings.Join(out, "\n")
	for _, w := range []string{
		"The link charts/shared (-> ../../elsewhere) leads to " + filepath.Join(filepath.Dir(dir), "elsewhere") + ", outside the runbook directory",
		"The link secrets/keys (-> " + outside + ") leads to " + outside + ", outside",
		"Copy what it leads to into the runbook directory, or give its path where it is used",
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("the diagnostics lack %q:\n%s", w, joined)
		}
	}
}
