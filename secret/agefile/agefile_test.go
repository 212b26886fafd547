package agefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

func TestRoundTripArmoredAndBinary(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, armored := range []bool{true, false} {
		b, err := agefile.Encrypt([]byte("hunter2-synapse-key"), armored, id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		if !agefile.IsEncrypted(b) || strings.Contains(string(b), "hunter2") {
			t.Fatalf("armored=%v: not an age file, or the secret shows: %q", armored, b)
		}
		got, err := agefile.Decrypt(append([]byte("\n "), b...), id)
		if err != nil || string(got) != "hunter2-synapse-key" {
			t.Fatalf("armored=%v: Decrypt = %q, %v", armored, got, err)
		}
	}
	if agefile.IsEncrypted([]byte("key: value\n")) {
		t.Error("plain YAML taken for an age file")
	}
}

func TestIdentitiesFromEnvAndFile(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	t.Setenv(agefile.IdentityEnv, "")
	if _, err := agefile.Identities(""); !errors.Is(err, agefile.ErrNoIdentity) {
		t.Fatalf("no identity: %v", err)
	}
	t.Setenv(agefile.IdentityEnv, id.String())
	ids, err := agefile.Identities("")
	if err != nil || agefile.RecipientOf(ids[0]).(*age.X25519Recipient).String() != id.Recipient().String() {
		t.Fatalf("identity from the environment: %v", err)
	}
	p := filepath.Join(t.TempDir(), "key.txt")
	os.WriteFile(p, []byte("# created: now\n"+id.String()+"\n"), 0o600)
	t.Setenv(agefile.IdentityEnv, p)
	if _, err := agefile.Identities(""); err != nil {
		t.Fatalf("identity from a path in the environment: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(bad, []byte("AGE-SECRET-KEY-1NOTAKEYATALLBUTLONGENOUGHTOLOOKLIKEONE\n"), 0o600)
	_, err = agefile.Identities(bad)
	if err == nil || strings.Contains(err.Error(), "NOTAKEY") {
		t.Fatalf("a bad identity: %v (must fail without quoting it)", err)
	}
}

func TestRecipientsFile(t *testing.T) {
	a, _ := age.GenerateX25519Identity()
	b, _ := age.GenerateX25519Identity()
	dir := t.TempDir()
	if _, err := agefile.RunbookRecipients(dir); err == nil || !strings.Contains(err.Error(), agefile.RecipientsFile) {
		t.Fatalf("missing file: %v", err)
	}
	p := filepath.Join(dir, agefile.RecipientsFile)
	os.WriteFile(p, []byte("# the team\n"+a.Recipient().String()+"\n\n"+b.Recipient().String()+"  \n"), 0o644)
	rs, err := agefile.RunbookRecipients(dir)
	if err != nil || len(rs) != 2 {
		t.Fatalf("Recipients = %d, %v", len(rs), err)
	}
	enc, _ := agefile.Encrypt([]byte("x"), true, rs...)
	for _, id := range []age.Identity{a, b} {
		if _, err := agefile.Decrypt(enc, id); err != nil {
			t.Errorf("a listed recipient cannot decrypt: %v", err)
		}
	}
	os.WriteFile(p, []byte(a.Recipient().String()+"\nage1nonsense\n"), 0o644)
	if _, err := agefile.Recipients(p); err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Fatalf("a bad line: %v (must name file:line)", err)
	}
}

func TestReadFileDecryptsOnlyWhenEncrypted(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	dir := t.TempDir()
	plain := filepath.Join(dir, "values.yaml")
	os.WriteFile(plain, []byte("a: 1\n"), 0o644)
	loads := 0
	load := func() ([]age.Identity, error) { loads++; return []age.Identity{id}, nil }
	if b, err := agefile.ReadFile(plain, load); err != nil || string(b) != "a: 1\n" || loads != 0 {
		t.Fatalf("plain: %q %v (identity loaded %d times)", b, err, loads)
	}
	enc, _ := agefile.Encrypt([]byte("b: 2\n"), false, id.Recipient())
	sealed := filepath.Join(dir, "values.yaml.age")
	os.WriteFile(sealed, enc, 0o600)
	if b, err := agefile.ReadFile(sealed, load); err != nil || string(b) != "b: 2\n" {
		t.Fatalf("sealed: %q %v", b, err)
	}
	other, _ := age.GenerateX25519Identity()
	_, err := agefile.ReadFile(sealed, func() ([]age.Identity, error) { return []age.Identity{other}, nil })
	if err == nil || !strings.Contains(err.Error(), sealed) {
		t.Fatalf("wrong identity: %v (must name the file)", err)
	}
}
