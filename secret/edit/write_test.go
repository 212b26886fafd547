package edit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteNewAllOrNothing: when the second of a pair exists, the first is
// not left behind (secrets gen talos writes a bundle and its talosconfig
// as one), nor any temporary file.
func TestWriteNewAllOrNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "secrets.yaml.age"), filepath.Join(dir, "talosconfig.age")
	if err := os.WriteFile(second, []byte("the user's"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteNew(NewFile{first, []byte("new bundle")}, NewFile{second, []byte("new talosconfig")})
	if err == nil || !strings.Contains(err.Error(), second+" exists already") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("WriteNew over an existing second file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "talosconfig.age" {
		t.Errorf("after the refusal the directory holds %v, want only the user's talosconfig.age", entries)
	}
	if b, _ := os.ReadFile(second); string(b) != "the user's" {
		t.Errorf("the existing file was changed: %q", b)
	}
	if err := WriteNew(NewFile{first, []byte("a")}, NewFile{filepath.Join(dir, "b"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{first, filepath.Join(dir, "b")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", p, fi, err)
		}
	}
}
