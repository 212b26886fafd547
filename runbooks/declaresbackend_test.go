package runbooks_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/homelab-migrate/migrate/runbooks"
)

// The state commands load the whole runbook only when a file of it has a
// backend block: the parser says so, not a pattern over the text.
func TestDeclaresBackend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"block", map[string]string{"main.hcl": "backend \"etcd\" {\n  endpoints = [\"https://a:2379\"]\n  prefix = \"/m\"\n}\n"}, true},
		{"one line", map[string]string{"state.hcl": `backend "local" {}`}, true},
		{"none", map[string]string{"main.hcl": "phase \"a\" {\n}\n"}, false},
		{"in a comment", map[string]string{"main.hcl": "# backend \"etcd\" {}\n/*\nbackend \"etcd\" {}\n*/\n"}, false},
		{"in a heredoc", map[string]string{"main.hcl": "variable \"x\" {\n  default = <<EOT\nbackend \"etcd\" {}\nEOT\n}\n"}, false},
		{"nested, not top level", map[string]string{"main.hcl": "phase \"a\" {\n  backend \"etcd\" {}\n}\n"}, false},
		{"a variables file", map[string]string{"site.auto.hcl": `backend "etcd" {}`}, false},
		{"does not parse", map[string]string{"main.hcl": "phase \"a\" {\n"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := runbooks.DeclaresBackend(dir); got != tc.want {
				t.Errorf("DeclaresBackend = %v, want %v", got, tc.want)
			}
		})
	}
}
