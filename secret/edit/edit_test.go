package edit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestSweepRemovesDeadEditsOnly: the clear copy of an edit whose process
// is gone is shredded away; a live edit's (and this process's) is kept.
func TestSweepRemovesDeadEditsOnly(t *testing.T) {
	base := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pid int) string {
		d, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", DirPrefix, pid))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "clear"), []byte("s3cret"), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	gone, mine, live := mk(dead.Process.Pid), mk(os.Getpid()), mk(os.Getppid())
	removed := Sweep(base)
	if len(removed) != 1 || removed[0] != gone {
		t.Errorf("Sweep removed %v, want only %s", removed, gone)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("the dead edit's directory is still there: %v", err)
	}
	for _, d := range []string{mine, live} {
		if _, err := os.Stat(filepath.Join(d, "clear")); err != nil {
			t.Errorf("a live edit's copy was removed: %v", err)
		}
	}
}

// TestEditSealsAgainAndLeavesNoCopy: the editor's change is sealed again
// (armored as before), no clear copy stays, an unchanged edit reports no
// change and a variables file that does not parse is refused and kept.
func TestEditSealsAgainAndLeavesNoCopy(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir, base := t.TempDir(), t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", base)
	path := filepath.Join(dir, "vars.hcl.age")
	sealed, err := agefile.Encrypt([]byte("token = \"old\"\n"), true, id.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, sealed, false); err != nil {
		t.Fatal(err)
	}
	editor := filepath.Join(t.TempDir(), "editor")
	if err := os.WriteFile(editor, []byte("#!/bin/sh\nif [ -n \"$NEW\" ]; then printf '%s' \"$NEW\" > \"$1\"; fi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDITOR", editor)
	o := Options{Recipients: []age.Recipient{id.Recipient()}, Identities: []age.Identity{id}}

	t.Setenv("NEW", "")
	if changed, err := Edit(path, o); err != nil || changed {
		t.Errorf("an unchanged edit: changed %v, %v", changed, err)
	}
	t.Setenv("NEW", "token = \n")
	if _, err := Edit(path, o); err == nil || !strings.Contains(err.Error(), "vars.hcl.age:1") || strings.Contains(err.Error(), "token =") {
		t.Errorf("an edit that does not parse: %v", err)
	}
	t.Setenv("NEW", "token = \"new\"\n")
	if changed, err := Edit(path, o); err != nil || !changed {
		t.Fatalf("an edit: changed %v, %v", changed, err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "-----BEGIN AGE ENCRYPTED FILE-----") {
		t.Errorf("the armored file was not sealed armored again: %.40q", b)
	}
	if clear, err := agefile.Decrypt(b, id); err != nil || string(clear) != "token = \"new\"\n" {
		t.Errorf("after the edit: %q %v", clear, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("a clear copy stayed in %s: %s", base, entries[0].Name())
	}
	plain := filepath.Join(dir, "plain.age")
	os.WriteFile(plain, []byte("in clear"), 0o600)
	if _, err := Edit(plain, o); err == nil || !strings.Contains(err.Error(), "not age-encrypted") || strings.Contains(err.Error(), "in clear") {
		t.Errorf("a file in clear: %v", err)
	}
}
