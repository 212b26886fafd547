package runbooks_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

const encryptedRunbook = `
variable "token" {}
variable "name" { default = "default" }
phase "p" {
  step "exec" "x" {
    command = [var.name, var.token]
  }
}
`

func sealed(t *testing.T, id *age.X25519Identity, clear string) []byte {
	t.Helper()
	b, err := agefile.Encrypt([]byte(clear), false, id.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Encrypted variables files, given or beside the runbook, are decrypted
// in memory; their values are sensitive though the block does not say so;
// *.auto.hcl(.age) are read by name, before --var-file.
func TestEncryptedVarFiles(t *testing.T) {
	t.Parallel()
	id, _ := age.GenerateX25519Identity()
	ids := func() ([]age.Identity, error) { return []age.Identity{id}, nil }
	given := filepath.Join(t.TempDir(), "secrets.hcl.age")
	if err := os.WriteFile(given, sealed(t, id, "token = \"given-Q4zXw9KpL2m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"main.hcl":          {Data: []byte(encryptedRunbook)},
		"a.auto.hcl":        {Data: []byte("name = \"auto-a\"\ntoken = \"plain\"\n")},
		"b.auto.hcl.age":    {Data: sealed(t, id, "token = \"auto-Vb7nR2xQ\"\n")},
		"notes.auto.hcl.gz": {Data: []byte("not read")},
	}
	for _, tc := range []struct {
		files []string
		want  []string
	}{
		{nil, []string{"auto-a", "auto-Vb7nR2xQ"}},
		{[]string{given}, []string{"auto-a", "given-Q4zXw9KpL2m"}},
	} {
		rb, diags := runbooks.NewLoader(fsys, runbooks.Options{Dir: "/rb", Schemas: testSchemas(), VarFiles: tc.files, Identities: ids}).Load()
		if diags.HasErrors() {
			t.Fatalf("%v: %s", tc.files, diags.Err())
		}
		v := eval(t, step(t, rb, "exec.x"), nil).GetAttr("command")
		if !v.ContainsMarked() {
			t.Errorf("%v: the value from an encrypted file is not marked sensitive", tc.files)
		}
		v, _ = v.UnmarkDeep()
		var got []string
		for _, e := range v.AsValueSlice() {
			got = append(got, e.AsString())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: command = %q, want %q", tc.files, got, tc.want)
		}
		if !slices.Contains(rb.Secrets, tc.want[1]) {
			t.Errorf("%v: %q is not given to the scrubber: %q", tc.files, tc.want[1], rb.Secrets)
		}
	}
}

// A problem in an encrypted file names the file and line, never quotes
// it, and its bytes are not kept for snippets; without an identity the
// error says how to give one.
func TestEncryptedVarFileDiagnostics(t *testing.T) {
	t.Parallel()
	id, _ := age.GenerateX25519Identity()
	clear := "name = \"fine\"\n\ntoken = [\"Zq8Lp3Wc\", bogus\n"
	fsys := fstest.MapFS{
		"main.hcl":             {Data: []byte(encryptedRunbook)},
		"secrets.auto.hcl.age": {Data: sealed(t, id, clear)},
	}
	l := runbooks.NewLoader(fsys, runbooks.Options{Dir: "/rb", Schemas: testSchemas(),
		Identities: func() ([]age.Identity, error) { return []age.Identity{id}, nil }})
	_, diags := l.Load()
	text := listDiags(diags)
	if !diags.HasErrors() || !strings.Contains(text, "secrets.auto.hcl.age:3") {
		t.Errorf("want an error at secrets.auto.hcl.age:3, got:\n%s", text)
	}
	if strings.Contains(text, "Zq8Lp3Wc") || strings.Contains(text, "bogus") {
		t.Errorf("the clear content shows:\n%s", text)
	}
	if _, ok := l.Files()["secrets.auto.hcl.age"]; ok {
		t.Error("the decrypted file is kept for snippets")
	}

	// A clear file named .age is refused without a word of its content
	// (age's own error would quote its start).
	plain := fstest.MapFS{"main.hcl": fsys["main.hcl"], "x.auto.hcl.age": {Data: []byte("token = \"Zq8Lp3Wc\"\n")}}
	_, diags = runbooks.NewLoader(plain, runbooks.Options{Dir: "/rb", Schemas: testSchemas(),
		Identities: func() ([]age.Identity, error) { return []age.Identity{id}, nil }}).Load()
	if text := listDiags(diags); !strings.Contains(text, "x.auto.hcl.age") || !strings.Contains(text, "not age-encrypted") || strings.Contains(text, "Zq8Lp3Wc") {
		t.Errorf("a clear file named .age: %s", text)
	}

	_, diags = runbooks.NewLoader(fsys, runbooks.Options{Dir: "/rb", Schemas: testSchemas(),
		Identities: func() ([]age.Identity, error) { return nil, agefile.ErrNoIdentity }}).Load()
	if text := listDiags(diags); !strings.Contains(text, "secrets.auto.hcl.age") || !strings.Contains(text, agefile.IdentityEnv) || !strings.Contains(text, "--age-identity") {
		t.Errorf("without an identity: %s", text)
	}
	// validate needs no values: without the identity, a warning only.
	_, diags = runbooks.NewLoader(fsys, runbooks.Options{Dir: "/rb", Schemas: testSchemas(), UnsetVarsUnknown: true,
		Identities: func() ([]age.Identity, error) { return nil, agefile.ErrNoIdentity }}).Load()
	if diags.HasErrors() || !strings.Contains(listDiags(diags), "Cannot Decrypt Variables File") {
		t.Errorf("validate without an identity: %s", listDiags(diags))
	}
}
