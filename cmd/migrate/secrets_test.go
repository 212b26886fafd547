package main

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"filippo.io/age"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/secret/agefile"
)

// migrateEnv runs the binary like migrate, with env added.
func migrateEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	return migrateWith(t, bin, dir, env, args...)
}

// migrateWith is migrateEnv with another migrate, exe.
func migrateWith(t *testing.T, exe, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"--runbook", dir}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("migrate %v: %v", args, err)
	}
	return r
}

// ageRunbook is a runbook directory whose .age-recipients lists a new
// identity, saved in key.txt outside it.
func ageRunbook(t *testing.T, files map[string]string) (dir, keyFile string, id *age.X25519Identity) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if files == nil {
		files = map[string]string{}
	}
	files[agefile.RecipientsFile] = "# whom secrets are sealed to\n" + id.Recipient().String() + "\n"
	dir = runbook(t, files)
	keyFile = filepath.Join(t.TempDir(), "key.txt")
	if err := os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, keyFile, id
}

func decryptFile(t *testing.T, path string, id age.Identity) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear, err := agefile.Decrypt(b, id)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(clear)
}

// editorScript is an $EDITOR that records where it was called and who
// else on disk holds the clear text, then writes $NEW_CONTENT (if set)
// and exits with $EDIT_EXIT.
const editorScript = `#!/bin/sh
f="$1"
echo "$f" > "$MARK/path"
stat -c %a "$f" > "$MARK/mode"
stat -c %a "$(dirname "$f")" > "$MARK/dirmode"
grep -rl "$CLEAR" "$RUNBOOK" "$XDG_RUNTIME_DIR" > "$MARK/found" 2>/dev/null
if [ -n "$NEW_CONTENT" ]; then printf '%s' "$NEW_CONTENT" > "$f"; fi
# SIGNAL: signal migrate, as a Ctrl-C or a kill would; migrate passes a
# SIGTERM on to the editor, which then dies here.
if [ -n "$SIGNAL" ]; then kill -"$SIGNAL" "$PPID"; fi
if [ "$SIGNAL" = TERM ]; then while :; do sleep 0.05; done; fi
exit "${EDIT_EXIT:-0}"
`

func readMark(t *testing.T, mark, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mark, name))
	if err != nil {
		t.Fatalf("the editor did not run: %v", err)
	}
	return strings.TrimSpace(string(b))
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("%s still holds %v: the temporary file was not removed", dir, entries[0].Name())
	}
}

// TestSecretsEncryptEdit: encrypt, then edit through $EDITOR on a private
// temporary file that is gone afterwards (also when the editor fails),
// with no clear copy anywhere else; unchanged and invalid edits keep
// the file.
func TestSecretsEncryptEdit(t *testing.T) {
	t.Parallel()
	const clear = "token = \"clear-Hx7Kq2Vb9\"\n"
	dir, keyFile, id := ageRunbook(t, map[string]string{"secrets.hcl": clear})
	plain := filepath.Join(dir, "secrets.hcl")
	sealedPath := plain + ".age"

	r := run(t, dir, 0, "secrets", "encrypt", plain)
	if !strings.Contains(r.stderr, "shred -u "+plain) {
		t.Errorf("encrypt does not tell to delete the clear file: %s", r)
	}
	if got := decryptFile(t, sealedPath, id); got != clear {
		t.Fatalf("decrypted %q", got)
	}
	if _, err := os.Stat(plain); err != nil {
		t.Errorf("encrypt without --rm removed the clear file: %v", err)
	}
	run(t, dir, 1, "secrets", "encrypt", plain) // FILE.age exists: not overwritten
	if err := os.Remove(plain); err != nil {
		t.Fatal(err)
	}

	mark, runtime := t.TempDir(), t.TempDir()
	editor := filepath.Join(t.TempDir(), "editor.sh")
	if err := os.WriteFile(editor, []byte(editorScript), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(newContent, exit string) []string {
		return []string{"EDITOR=" + editor, "MARK=" + mark, "CLEAR=clear-Hx7Kq2Vb9", "RUNBOOK=" + dir,
			"XDG_RUNTIME_DIR=" + runtime, "NEW_CONTENT=" + newContent, "EDIT_EXIT=" + exit, "MIGRATE_AGE_IDENTITY="}
	}
	edit := func(code int, newContent, exit string) result {
		t.Helper()
		r := migrateEnv(t, dir, env(newContent, exit), "--age-identity", keyFile, "secrets", "edit", sealedPath)
		expect(t, r, code, "secrets", "edit")
		emptyDir(t, runtime)
		return r
	}
	before, _ := os.ReadFile(sealedPath)

	// The editor fails: nothing saved, the file removed.
	edit(1, "token = \"lost\"\n", "1")
	if after, _ := os.ReadFile(sealedPath); !bytes.Equal(after, before) {
		t.Error("a failed editor changed the file")
	}
	tmp := readMark(t, mark, "path")
	if !strings.HasPrefix(tmp, runtime+"/") || filepath.Base(tmp) != "secrets.hcl" {
		t.Errorf("the temporary file %s is not under $XDG_RUNTIME_DIR %s", tmp, runtime)
	}
	if m, d := readMark(t, mark, "mode"), readMark(t, mark, "dirmode"); m != "600" || d != "700" {
		t.Errorf("temporary file mode %s in a directory of mode %s, want 600 in 700", m, d)
	}
	if found := readMark(t, mark, "found"); found != tmp {
		t.Errorf("during the edit the clear text is in %q, want only the temporary file %s", found, tmp)
	}

	// SIGTERM to migrate: passed on to the editor, nothing saved, the
	// file removed. Ctrl-C: migrate lives on, the editor decides.
	r = migrateEnv(t, dir, append(env("token = \"lost\"\n", "0"), "SIGNAL=TERM"), "--age-identity", keyFile, "secrets", "edit", sealedPath)
	expect(t, r, 1, "secrets", "edit")
	emptyDir(t, runtime)
	if after, _ := os.ReadFile(sealedPath); !bytes.Equal(after, before) {
		t.Error("an edit whose migrate got SIGTERM was saved")
	}
	// kill -9 of migrate: nothing can remove the clear copy then; the
	// next edit removes it (its migrate is dead) and says so.
	r = migrateEnv(t, dir, append(env("token = \"lost\"\n", "0"), "SIGNAL=KILL"), "--age-identity", keyFile, "secrets", "edit", sealedPath)
	if r.code == 0 {
		t.Fatalf("secrets edit whose migrate got SIGKILL: %s", r)
	}
	left, _ := filepath.Glob(filepath.Join(runtime, "migrate-edit-*"))
	if len(left) != 1 {
		t.Fatalf("after a kill -9 the runtime directory holds %v, want the killed edit's directory", left)
	}
	r = edit(0, "", "0")
	if !strings.Contains(r.stderr, "Removed "+left[0]) {
		t.Errorf("the next edit does not say it removed the clear copy of the killed one: %s", r)
	}
	if after, _ := os.ReadFile(sealedPath); !bytes.Equal(after, before) {
		t.Error("an edit whose migrate was killed was saved")
	}
	const afterInt = "token = \"after-ctrl-c\"\n"
	r = migrateEnv(t, dir, append(env(afterInt, "0"), "SIGNAL=INT"), "--age-identity", keyFile, "secrets", "edit", sealedPath)
	expect(t, r, 0, "secrets", "edit")
	emptyDir(t, runtime)
	if got := decryptFile(t, sealedPath, id); got != afterInt {
		t.Errorf("after a Ctrl-C the editor went on with: %q", got)
	}
	before, _ = os.ReadFile(sealedPath)

	// No change: the file is untouched.
	r = edit(0, "", "0")
	if !strings.Contains(r.stderr, "No change") {
		t.Errorf("unchanged edit: %s", r)
	}
	if after, _ := os.ReadFile(sealedPath); !bytes.Equal(after, before) {
		t.Error("an unchanged edit rewrote the file")
	}

	// Invalid HCL: refused, the previous file kept, no clear snippet.
	r = edit(1, "token = \"clear-Hx7Kq2Vb9\nbroken = [\n", "0")
	if !strings.Contains(r.stderr, "secrets.hcl.age:") || strings.Contains(r.stderr, "Hx7Kq2Vb9") || strings.Contains(r.stderr, "broken") {
		t.Errorf("invalid edit: want file:line and no clear text: %s", r)
	}
	if after, _ := os.ReadFile(sealedPath); !bytes.Equal(after, before) {
		t.Error("an invalid edit was saved")
	}

	// A real edit, with the identity from the environment.
	const edited = "token = \"edited-Pw3Zr8Ty\"\n"
	r = migrateEnv(t, dir, append(env(edited, "0"), "MIGRATE_AGE_IDENTITY="+id.String()), "secrets", "edit", sealedPath)
	expect(t, r, 0, "secrets", "edit")
	emptyDir(t, runtime)
	if got := decryptFile(t, sealedPath, id); got != edited {
		t.Errorf("after the edit: %q", got)
	}
	if fi, _ := os.Stat(sealedPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("saved with mode %v", fi.Mode())
	}

	// --rm removes the clear file once encrypted.
	other := filepath.Join(dir, "values.yaml")
	os.WriteFile(other, []byte("password: Jk4Lm7Np\n"), 0o600)
	run(t, dir, 0, "secrets", "encrypt", "--rm", other)
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("--rm left the clear file: %v", err)
	}
	if got := decryptFile(t, other+".age", id); got != "password: Jk4Lm7Np\n" {
		t.Errorf("values.yaml.age: %q", got)
	}
}

// TestSecretsGenTalos: a new Talos bundle written only encrypted, that
// machinery loads; an existing one is never overwritten.
func TestSecretsGenTalos(t *testing.T) {
	t.Parallel()
	made := madeMigrate(t)
	dir, _, id := ageRunbook(t, nil)
	var env []string // the program beside migrate, verified
	r := migrateWith(t, made.migrate, dir, env, "secrets", "gen", "talos", "--talos-version", "v1.13.3")
	expect(t, r, 0, "secrets", "gen", "talos")
	if strings.Contains(r.stderr, "NOT VERIFIED") {
		t.Errorf("the program beside a migrate built by make build is said unverified: %s", r)
	}
	out := filepath.Join(dir, "secrets", "secrets.yaml.age")
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", out, fi, err)
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 3 { // .age-recipients, the bundle and the talosconfig: no clear copy
		t.Errorf("files in the runbook: %v", files)
	}
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal([]byte(decryptFile(t, out, id)), bundle); err != nil {
		t.Fatal(err)
	}
	if err := bundle.Validate(nil); err != nil || bundle.Certs == nil || bundle.Secrets.BootstrapToken == "" {
		t.Fatalf("the bundle does not load: %v", err)
	}
	// The talosconfig is an administrator's of that cluster: its
	// certificate is signed by the bundle's Talos API CA.
	tc, err := clientconfig.FromString(decryptFile(t, filepath.Join(dir, "secrets", "talosconfig.age"), id))
	if err != nil {
		t.Fatal(err)
	}
	ctx := tc.Contexts[tc.Context]
	if tc.Context != "home" || ctx == nil {
		t.Fatalf("the talosconfig's context: %q of %v", tc.Context, tc.Contexts)
	}
	if ca, _ := base64.StdEncoding.DecodeString(ctx.CA); !bytes.Equal(ca, bundle.Certs.OS.Crt) {
		t.Errorf("the talosconfig's CA is not the bundle's Talos API CA")
	}
	crtPEM, _ := base64.StdEncoding.DecodeString(ctx.Crt)
	block, _ := pem.Decode(crtPEM)
	caBlock, _ := pem.Decode(bundle.Certs.OS.Crt)
	if block == nil || caBlock == nil {
		t.Fatal("the talosconfig's certificate or the CA is not PEM")
	}
	crt, err1 := x509.ParseCertificate(block.Bytes)
	caCrt, err2 := x509.ParseCertificate(caBlock.Bytes)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if err := crt.CheckSignatureFrom(caCrt); err != nil || !slices.Contains(crt.Subject.Organization, "os:admin") {
		t.Errorf("the admin certificate (%v) is not signed by the bundle's CA: %v", crt.Subject, err)
	}
	before, _ := os.ReadFile(out)
	r = migrateWith(t, made.migrate, dir, env, "secrets", "gen", "talos")
	expect(t, r, 1, "secrets", "gen", "talos")
	if after, _ := os.ReadFile(out); !bytes.Equal(after, before) || !strings.Contains(r.stderr, "exists") {
		t.Errorf("an existing bundle was overwritten, or the refusal does not say why: %s", r)
	}
}

// TestEncryptedVarFileCanary: values from an encrypted variables file,
// auto-loaded beside the runbook or given with --var-file, are secret
// though their variables do not say sensitive: in no output, plan, state,
// journal or log; and a problem in such a file names it without a snippet.
func TestEncryptedVarFileCanary(t *testing.T) {
	t.Parallel()
	const auto, given = "AUTO-" + canary, "GIVEN-" + canary
	dir, keyFile, id := ageRunbook(t, map[string]string{"main.hcl": `
variable "token" {}
variable "extra" { default = "none" }

phase "A" {
  step "exec" "use" {
    command = ["sh", "-c", "echo token=${var.token} extra=${var.extra}; echo ok > used.txt"]
    revert  = ["sh", "-c", "echo ${var.token} >/dev/null; rm -f used.txt"]
  }
}
`})
	write := func(path, clear string) {
		b, err := agefile.Encrypt([]byte(clear), false, id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "secrets.auto.hcl.age"), "token = \""+auto+"\"\n")
	givenFile := filepath.Join(t.TempDir(), "more.hcl.age")
	write(givenFile, "extra = \""+given+"\"\n")
	planFile := filepath.Join(dir, "plan.json")
	id1 := []string{"--age-identity", keyFile}
	vf := []string{"--var-file", givenFile}
	var all []result
	for _, c := range []struct {
		code int
		args []string
	}{
		{0, append(append(id1, "plan", "--out", planFile), vf...)},
		{0, append(append(id1, "plan", "--json"), vf...)},
		{0, append(append(id1, "run", "--plan", planFile, "--json"), vf...)},
		{0, append(id1, "status", "--json")},
		{0, append(id1, "state", "show", "--json")},
		{0, append(append(id1, "rollback", "--auto-approve", "--log-level", "debug"), vf...)},
	} {
		r := migrateEnv(t, dir, []string{"MIGRATE_AGE_IDENTITY="}, c.args...)
		expect(t, r, c.code, c.args...)
		all = append(all, r)
	}
	if !strings.Contains(all[2].stdout, "token=(sensitive value) extra=(sensitive value)") {
		t.Errorf("the step's output is not redacted as expected: %s", all[2])
	}
	for _, r := range all {
		if strings.Contains(r.stdout+r.stderr, canary) {
			t.Errorf("the canary leaked into the output: %s", r)
		}
	}
	files := []string{planFile}
	filepath.WalkDir(filepath.Join(dir, ".migrate"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(canary)) {
			t.Errorf("the canary leaked into %s", f)
		}
	}
	if len(files) < 3 {
		t.Errorf("want the plan, the state and the logs, got %v", files)
	}

	// Without an identity: the file is named, and how to give one.
	r := migrateEnv(t, dir, []string{"MIGRATE_AGE_IDENTITY="}, "plan")
	expect(t, r, 1, "plan")
	if !strings.Contains(r.stderr, "secrets.auto.hcl.age") || !strings.Contains(r.stderr, "--age-identity") {
		t.Errorf("plan without an identity: %s", r)
	}
	// A bad line: file and line, no snippet of the clear text.
	write(filepath.Join(dir, "secrets.auto.hcl.age"), "token = \""+auto+"\"\nextra = [\""+canary+"\",\n")
	r = migrateEnv(t, dir, []string{"MIGRATE_AGE_IDENTITY=" + keyFile}, "plan")
	expect(t, r, 1, "plan")
	if !strings.Contains(r.stderr, "on secrets.auto.hcl.age line 3") || strings.Contains(r.stdout+r.stderr, canary) {
		t.Errorf("plan with a bad encrypted file: %s", r)
	}
}

// TestSecretsGenIdentity: a new age identity, 0600 in a 0700 directory,
// that opens what is sealed to the recipient it prints; the secret key is
// never printed, and an existing identity is never replaced.
func TestSecretsGenIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "config", "migrate", "age.key")
	r := migrateEnv(t, dir, nil, "secrets", "gen", "identity", path)
	expect(t, r, 0, "secrets", "gen", "identity")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, fi, err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("its directory is %o", di.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	ids, err := age.ParseIdentities(bytes.NewReader(b))
	if err != nil || len(ids) != 1 {
		t.Fatalf("the identity file does not parse: %v\n%s", err, b)
	}
	recipient := ids[0].(*age.X25519Identity).Recipient().String()
	if !strings.Contains(r.stderr, recipient) || strings.Contains(r.stdout+r.stderr, "AGE-SECRET-KEY-") {
		t.Errorf("the output names the recipient %s and no secret key? %s", recipient, r)
	}
	sealed, err := agefile.Encrypt([]byte("hello"), true, ids[0].(*age.X25519Identity).Recipient())
	if err != nil {
		t.Fatal(err)
	}
	if clear, err := agefile.Decrypt(sealed, ids[0]); err != nil || string(clear) != "hello" {
		t.Errorf("sealed to its recipient, opened with it: %q %v", clear, err)
	}

	r = migrateEnv(t, dir, nil, "secrets", "gen", "identity", path)
	if after, _ := os.ReadFile(path); r.code != 1 || !strings.Contains(r.stderr, "exists already: not overwriting it") || string(after) != string(b) {
		t.Errorf("a second identity over the first: %s", r)
	}
}
