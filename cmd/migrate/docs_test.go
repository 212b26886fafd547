package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checked-in files these tests keep up to date, from this package.
var (
	referenceFile = filepath.Join("..", "..", "docs", "reference.md")
	homelabSVG    = filepath.Join("..", "..", "docs", "homelab.svg")
)

// TestReferenceUpToDate: docs/reference.md is what migrate docs writes
// from the schemas compiled in now.
func TestReferenceUpToDate(t *testing.T) {
	want, err := referenceText()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/reference.md is out of date: run go run ./cmd/migrate docs (from the repository's root)\n%s", firstDiff(got, want))
	}
}

// TestStepTypesSayWhatRollbackDoes: every step type documents its
// rollback, which the reference and its "undone by rollback" column show.
func TestStepTypesSayWhatRollbackDoes(t *testing.T) {
	for name, f := range registry() {
		for st, typ := range f().Schema().StepTypes {
			if typ.Rollback == "" {
				t.Errorf("step type %s of provider %s does not say what rollback does: set Rollback in its sdk.StepType (for talos and helm, then go generate ./providers/...)", st, name)
			}
		}
	}
}

// TestDocsCheck: docs --check passes on the file docs wrote, and fails
// on another one, saying what to run.
func TestDocsCheck(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ref.md")
	run(t, dir, 0, "docs", "--out", out)
	run(t, dir, 0, "docs", "--out", out, "--check")
	if err := os.WriteFile(out, []byte("# Reference\n\nold\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 1, "docs", "--out", out, "--check")
	if want := out + " is out of date: run migrate docs"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r)
	}
	os.Remove(out)
	run(t, dir, 1, "docs", "--out", out, "--check") // missing counts as out of date
}

// TestHomelabGraphUpToDate: docs/homelab.svg, the picture the README
// shows, is what migrate graph draws for examples/homelab now.
func TestHomelabGraphUpToDate(t *testing.T) {
	example, err := filepath.Abs(filepath.Join("..", "..", "examples", "homelab"))
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, example, 0, "graph", "--format", "svg")
	got, err := os.ReadFile(homelabSVG)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != r.stdout {
		t.Fatalf("docs/homelab.svg is out of date: run go run ./cmd/migrate graph --runbook examples/homelab --format svg > docs/homelab.svg (from the repository's root)\n%s", firstDiff(got, []byte(r.stdout)))
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("first difference, line %d:\n  file:      %.200s\n  generated: %.200s", i+1, gl, wl)
		}
	}
	return ""
}
