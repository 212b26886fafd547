package examples_test

import (
	"io/fs"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/examples"
)

// TestHomelabIsWhatGitTracks: the embedded example is exactly the files
// git tracks under examples/homelab, none missing (a chart's _helpers.tpl,
// .age-recipients) and none extra (a kubeconfig or state a run left).
func TestHomelabIsWhatGitTracks(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "homelab").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var tracked []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasSuffix(l, ".go") { // the Go package of the runbook's template (homelab.Runbook)
			tracked = append(tracked, strings.TrimPrefix(l, "homelab/"))
		}
	}
	var embedded []string
	err = fs.WalkDir(examples.Homelab(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded = append(embedded, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tracked)
	slices.Sort(embedded)
	if !slices.Equal(tracked, embedded) {
		t.Errorf("embedded:\n  %s\ntracked by git:\n  %s", strings.Join(embedded, "\n  "), strings.Join(tracked, "\n  "))
	}
}
