package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
)

// TestExecScriptDigest: the script an exec step runs, and only it, is
// part of its input digest: argv[0] as a path, or the file after an
// interpreter, inside the runbook directory. A file the command writes,
// a command string and a program outside the runbook are not.
func TestExecScriptDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, text := range map[string]string{"do.sh": "echo one\n", "tool.py": "print(1)\n", "a.txt": "a\n", "b.txt": "b\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := local.New()
	if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "local", Config: cty.EmptyObjectVal, Dir: dir}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	digest := func(argv ...string) string {
		t.Helper()
		list := make([]cty.Value, len(argv))
		for i, a := range argv {
			list[i] = cty.StringVal(a)
		}
		cfg := cty.ObjectVal(map[string]cty.Value{"command": cty.ListVal(list)})
		r := p.InputDigest(context.Background(), providers.DigestRequest{Type: local.Exec, Addr: phases.Address{Type: local.Exec, Name: "x"}, Config: cfg})
		if r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		return r.Digest
	}
	edit := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("edited\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, argv := range [][]string{{"sh", "do.sh"}, {"./do.sh"}, {"bash", "-e", "do.sh"}} {
		before := digest(argv...)
		if before == "" {
			t.Errorf("%q: no digest of its script", argv)
		}
		edit("do.sh")
		if digest(argv...) == before {
			t.Errorf("%q: an edited script leaves the digest as it was", argv)
		}
		os.WriteFile(filepath.Join(dir, "do.sh"), []byte("echo one\n"), 0o755)
	}
	if d := digest("python3", "tool.py"); d == "" {
		t.Error("python3 tool.py: no digest of its script")
	}
	for _, argv := range [][]string{{"cp", "a.txt", "b.txt"}, {"sh", "-c", "do.sh"}, {"/bin/sh", "-c", "echo"}, {"true"}} {
		if d := digest(argv...); d != "" {
			t.Errorf("%q: a digest %q of a file it does not run as its script", argv, d)
		}
	}
}
