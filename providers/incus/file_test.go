package incus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// providerIn returns a provider configured for the runbook directory dir.
func providerIn(t testing.TB, dir string) *incus.Provider {
	t.Helper()
	p := incus.New()
	if d := p.Configure(context.Background(), providers.ConfigureRequest{Name: "test", Config: cty.EmptyObjectVal, Dir: dir}).Diagnostics; d.HasErrors() {
		t.Fatalf("Configure: %v", d.Err())
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func writeFile(t testing.TB, p, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func stat(t testing.TB, c *incusapi.Client, name, p string) *incusapi.FileInfo {
	t.Helper()
	fi, err := c.StatFile(ctxT(t, 10*time.Second), name, p)
	if incusapi.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func fileOutputs(t testing.TB, r providers.ApplyResponse, sha string, size, files int64) {
	t.Helper()
	o := r.Outputs
	if got := o.GetAttr("sha256").AsString(); got != sha {
		t.Errorf("sha256 = %s, want %s", got, sha)
	}
	if !o.GetAttr("size").RawEquals(cty.NumberIntVal(size)) || !o.GetAttr("files").RawEquals(cty.NumberIntVal(files)) {
		t.Errorf("size, files = %#v, %#v; want %d, %d", o.GetAttr("size"), o.GetAttr("files"), size, files)
	}
}

// TestFile: push and pull a file and a tree, with mode and owner seen
// through the API; a second apply changes nothing; a push that replaced
// a file is reverted by putting it back; a pull into .age is encrypted
// and the clear content is in no local file.
func TestFile(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "file", true, nil)
	dir := t.TempDir()
	p := providerIn(t, dir)

	t.Run("push file replacing one", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "secrets/x"), "new content\n", 0o600)
		if err := c.PushFile(ctxT(t, 10*time.Second), name, "/etc/x", incusapi.FilePut{Mode: 0o644, UID: 3, GID: 4, Content: strings.NewReader("old content\n")}); err != nil {
			t.Fatal(err)
		}
		s := newStep(t, p, incus.File, "x", map[string]cty.Value{
			"instance": str(name), "source": str("secrets/x"), "destination": str("/etc/x"), "mode": str("0640"), "uid": cty.NumberIntVal(5), "gid": cty.NumberIntVal(6)})
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, "+ push ./secrets/x -> "+name+":/etc/x (0640, 5:6), 12 bytes", "replaces /etc/x (kept as /etc/x.migrate-orig until rollback)")
		r := s.mustApply(plan.Private, nil)
		fileOutputs(t, r, sum("new content\n"), 12, 1)
		if got := readIn(t, c, name, "/etc/x"); got != "new content\n" {
			t.Errorf("/etc/x = %q", got)
		}
		if fi := stat(t, c, name, "/etc/x"); fi == nil || *fi != (incusapi.FileInfo{Type: "file", UID: 5, GID: 6, Mode: 0o640}) {
			t.Errorf("/etc/x is %+v", fi)
		}
		if got := readIn(t, c, name, "/etc/x.migrate-orig"); got != "old content\n" {
			t.Errorf("the replaced content was not kept: %q", got)
		}
		if strings.Contains(string(r.Revert.Data), "old content") {
			t.Errorf("the replaced content is in the revert data: %s", r.Revert.Data)
		}
		// Idempotent.
		if rd := s.read(priorOf(r)); rd.Observation != providers.Present {
			t.Errorf("read after apply: %v %s", rd.Observation, rd.Detail)
		}
		wantContains(t, "second plan", s.mustPlan(priorOf(r)).Diff, "nothing to copy")
		// Found done with no record (a run stopped before it): the
		// adopted revert data still puts back the replaced file.
		if rd := s.read(nil); rd.Observation != providers.Present || rd.Revert == nil || !strings.Contains(string(rd.Revert.Data), `"replaced":[""]`) {
			t.Errorf("read without a record: %v %+v", rd.Observation, rd.Revert)
		}
		r2 := s.mustApply(nil, priorOf(r))
		s.revert(r2.Revert)
		s.revert(r2.Revert) // twice is safe
		if got := readIn(t, c, name, "/etc/x"); got != "old content\n" {
			t.Errorf("after revert /etc/x = %q", got)
		}
		if fi := stat(t, c, name, "/etc/x"); fi == nil || *fi != (incusapi.FileInfo{Type: "file", UID: 3, GID: 4, Mode: 0o644}) {
			t.Errorf("after revert /etc/x is %+v", fi)
		}
		if fi := stat(t, c, name, "/etc/x.migrate-orig"); fi != nil {
			t.Errorf("the kept copy is still there after the revert")
		}
	})

	t.Run("push tree", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "conf/a.conf"), "a\n", 0o644)
		writeFile(t, filepath.Join(dir, "conf/sub/b.conf"), "bb\n", 0o600)
		s := newStep(t, p, incus.File, "conf", map[string]cty.Value{"instance": str(name), "source": str("conf"), "destination": str("/root/conf")})
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, "+ push ./conf -> "+name+":/root/conf (0:0), 5 bytes in 2 files")
		r := s.mustApply(plan.Private, nil)
		fileOutputs(t, r, sum("a.conf "+sum("a\n")+"\nsub/b.conf "+sum("bb\n")+"\n"), 5, 2)
		if got := readIn(t, c, name, "/root/conf/sub/b.conf"); got != "bb\n" {
			t.Errorf("b.conf = %q", got)
		}
		if fi := stat(t, c, name, "/root/conf/sub/b.conf"); fi == nil || fi.Mode != 0o600 {
			t.Errorf("b.conf is %+v, want the local mode 0600", fi)
		}
		wantContains(t, "second plan", s.mustPlan(priorOf(r)).Diff, "nothing to copy")
		// Into a directory that is there, with another owner: it keeps
		// its own, and a second plan has nothing to do.
		into := newStep(t, p, incus.File, "into", map[string]cty.Value{"instance": str(name), "source": str("conf/sub"), "destination": str("/root"), "uid": cty.NumberIntVal(9)})
		ri := into.mustApply(into.mustPlan(nil).Private, nil)
		wantContains(t, "plan into /root", into.mustPlan(priorOf(ri)).Diff, "nothing to copy")
		if fi := stat(t, c, name, "/root"); fi == nil || fi.UID != 0 {
			t.Errorf("/root is %+v after a push into it", fi)
		}
		into.revert(ri.Revert)
		if fi := stat(t, c, name, "/root/b.conf"); fi != nil || stat(t, c, name, "/root") == nil {
			t.Errorf("the revert of a push into /root left b.conf, or removed /root")
		}
		s.revert(r.Revert)
		if fi := stat(t, c, name, "/root/conf"); fi != nil {
			t.Errorf("the pushed tree is still there after the revert: %+v", fi)
		}
	})

	t.Run("pull file and tree", func(t *testing.T) {
		for path, content := range map[string]string{"/srv/data/one": "1\n", "/srv/data/deep/two": "22\n"} {
			for _, d := range []string{"/srv", "/srv/data", "/srv/data/deep"} {
				_ = c.PushFile(ctxT(t, 10*time.Second), name, d, incusapi.FilePut{Type: "directory"})
			}
			if err := c.PushFile(ctxT(t, 10*time.Second), name, path, incusapi.FilePut{Content: strings.NewReader(content)}); err != nil {
				t.Fatal(err)
			}
		}
		s := newStep(t, p, incus.File, "data", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/srv/data"), "destination": str("out/data")})
		if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
			t.Fatal(err)
		}
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, "+ pull "+name+":/srv/data -> ./out/data (0600), 5 bytes in 2 files")
		r := s.mustApply(plan.Private, nil)
		fileOutputs(t, r, sum("deep/two "+sum("22\n")+"\none "+sum("1\n")+"\n"), 5, 2)
		b, err := os.ReadFile(filepath.Join(dir, "out/data/deep/two"))
		if err != nil || string(b) != "22\n" {
			t.Errorf("deep/two = %q %v", b, err)
		}
		if fi, _ := os.Stat(filepath.Join(dir, "out/data/one")); fi == nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("a pulled file is %v, want 0600", fi)
		}
		wantContains(t, "second plan", s.mustPlan(priorOf(r)).Diff, "nothing to copy")
		s.revert(r.Revert)
		if _, err := os.Stat(filepath.Join(dir, "out/data")); !os.IsNotExist(err) {
			t.Errorf("the pulled tree is still there after the revert: %v", err)
		}

		// A single file replacing a local one, put back by the revert.
		writeFile(t, filepath.Join(dir, "out/one"), "mine\n", 0o644)
		s = newStep(t, p, incus.File, "one", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/srv/data/one"), "destination": str("out/one")})
		r = s.mustApply(s.mustPlan(nil).Private, nil)
		fileOutputs(t, r, sum("1\n"), 2, 1)
		s.revert(r.Revert)
		if b, _ := os.ReadFile(filepath.Join(dir, "out/one")); string(b) != "mine\n" {
			t.Errorf("after revert out/one = %q", b)
		}
	})

	t.Run("pull to age", func(t *testing.T) {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, agefile.RecipientsFile), id.Recipient().String()+"\n", 0o644)
		clear := "signing key ed25519 a_secret_" + unique("key") + "\n"
		if err := c.PushFile(ctxT(t, 10*time.Second), name, "/srv/signing.key", incusapi.FilePut{Mode: 0o600, Content: strings.NewReader(clear)}); err != nil {
			t.Fatal(err)
		}
		s := newStep(t, p, incus.File, "key", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/srv/signing.key"), "destination": str("secrets/signing.key.age")})
		plan := s.mustPlan(nil)
		wantContains(t, "plan", plan.Diff, "-> ./secrets/signing.key.age (age-encrypted to 1 recipients)")
		r := s.mustApply(plan.Private, nil)
		fileOutputs(t, r, sum(clear), int64(len(clear)), 1)
		sealed, err := os.ReadFile(filepath.Join(dir, "secrets/signing.key.age"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := agefile.Decrypt(sealed, id)
		if err != nil || string(got) != clear {
			t.Errorf("decrypted %q, %v", got, err)
		}
		// The clear content is in no file of the runbook directory.
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("a_secret_")) {
					t.Errorf("%s holds the clear content", p)
				}
			}
			return nil
		})
		if rd := s.read(priorOf(r)); rd.Observation != providers.Present {
			t.Errorf("read after apply: %v %s", rd.Observation, rd.Detail)
		}
		s.revert(r.Revert)
		if _, err := os.Stat(filepath.Join(dir, "secrets/signing.key.age")); !os.IsNotExist(err) {
			t.Errorf("the encrypted file is still there after the revert: %v", err)
		}
	})

	t.Run("push through a link", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "real/target"), "linked\n", 0o644)
		if err := os.Symlink("real/target", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		s := newStep(t, p, incus.File, "link", map[string]cty.Value{"instance": str(name), "source": str("link"), "destination": str("/root/linked")})
		r := s.mustApply(s.mustPlan(nil).Private, nil)
		if got := readIn(t, c, name, "/root/linked"); got != "linked\n" {
			t.Errorf("/root/linked = %q", got)
		}
		s.revert(r.Revert)
		// A symlink in the instance is no source to pull.
		s = newStep(t, p, incus.File, "pull-link", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/bin/sh"), "destination": str("sh")})
		wantDiag(t, s.plan(nil).Diagnostics, "File Not Found", "incus_file.pull-link")
	})

	t.Run("bad input", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "lone"), "x", 0o644)
		s := newStep(t, p, incus.File, "noparent", map[string]cty.Value{"instance": str(name), "source": str("lone"), "destination": str("/no/such/dir/lone")})
		r, _ := s.apply(ctxT(t, 30*time.Second), nil, nil)
		wantDiag(t, r.Diagnostics, "Cannot Push File", "incus_file.noparent", "parent directory /no/such/dir does not exist")

		s = newStep(t, p, incus.File, "bad", map[string]cty.Value{"instance": str(name), "direction": str("sideways"), "source": str("x"), "destination": str("rel"), "mode": str("rw")})
		d := s.plan(nil).Diagnostics
		wantDiag(t, d, "Invalid Attribute Value", "incus_file.bad", `"sideways"`)
		s = newStep(t, p, incus.File, "missing", map[string]cty.Value{"instance": str(name), "source": str("nothing-here"), "destination": str("/etc/y")})
		wantDiag(t, s.plan(nil).Diagnostics, "File Not Found", "incus_file.missing", "./nothing-here")
	})
}

// TestFilePlannedAfterTheStepThatMakesIt: a pull whose source an earlier
// step of the run creates is planned (and says so); with no such step the
// missing source is an error.
func TestFilePlannedAfterTheStepThatMakesIt(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "filelater", true, nil)
	s := newStep(t, p, incus.File, "later", map[string]cty.Value{"instance": str(name), "direction": str("pull"),
		"source": str("/root/export"), "destination": str(filepath.Join(t.TempDir(), "export"))})
	wantDiag(t, s.plan(nil).Diagnostics, "File Not Found", name+":/root/export")
	r := p.Plan(ctxT(t, 60*time.Second), providers.PlanRequest{Type: incus.File, Addr: s.addr, Config: s.cfg, Action: providers.Create, AfterChanges: true})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("after a step that makes it: %v", err)
	}
	if !strings.Contains(r.Diff, "+ pull "+name+":/root/export") || !strings.Contains(r.Diff, "is not there yet") {
		t.Errorf("the plan: %q", r.Diff)
	}
}

// TestPullHandedOverToLaterSteps: once the steps that depend on a pull
// ran (a restore that unpacks the export, removes the archive, chowns the
// tree), the engine reads the copy again with Rebase and records that it
// handed its destination over. From then on what they made of it is not
// drift; a change of the source is, and a destination removed from
// outside the runbook is, each saying which.
func TestPullHandedOverToLaterSteps(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "filehand", true, nil)
	ctx := ctxT(t, 30*time.Second)
	if err := c.PushFile(ctx, name, "/root/export", incusapi.FilePut{Type: "directory", Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{"/root/export/homeserver.db": "db", "/root/export/media.tar": "tar", "/root/export/.done": ""} {
		if err := c.PushFile(ctx, name, path, incusapi.FilePut{Mode: 0o600, Content: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	dest := filepath.Join(t.TempDir(), "matrix")
	s := newStep(t, p, incus.File, "data", map[string]cty.Value{"instance": str(name), "direction": str("pull"),
		"source": str("/root/export"), "destination": str(dest)})
	r := s.mustApply(s.mustPlan(nil).Private, nil)
	prior := priorOf(r)

	// The restore: the archive unpacked and removed, a new file.
	if err := os.Remove(filepath.Join(dest, "media.tar")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dest, "media", "a.png"), "png", 0o644)
	if rd := s.read(prior); rd.Observation != providers.Drifted {
		t.Fatalf("before the hand-over, a changed destination reads %v %q", rd.Observation, rd.Detail)
	}
	rebased := p.Read(ctx, providers.ReadRequest{Type: incus.File, Addr: s.addr, Config: s.cfg, Prior: prior, Rebase: true})
	if rebased.Diagnostics.HasErrors() || rebased.Observation != providers.Present || !strings.Contains(string(rebased.Private), `"handed_over":true`) {
		t.Fatalf("the rebase read: %v %s %v", rebased.Observation, rebased.Private, rebased.Diagnostics.Err())
	}
	prior.Private = rebased.Private
	if rd := s.read(prior); rd.Observation != providers.Present {
		t.Errorf("after the hand-over, what the restore made reads %v %q", rd.Observation, rd.Detail)
	}

	// The source changes: drift, saying so.
	if err := c.PushFile(ctx, name, "/root/export/homeserver.db", incusapi.FilePut{Mode: 0o600, Content: strings.NewReader("db, exported again")}); err != nil {
		t.Fatal(err)
	}
	rd := s.read(prior)
	if rd.Observation != providers.Drifted {
		t.Fatalf("a changed source reads %v %q", rd.Observation, rd.Detail)
	}
	wantContains(t, "the drift", rd.Detail, "its source "+name+":/root/export changed since the copy", "overwrites what the steps after it made of "+dest)
	if err := c.PushFile(ctx, name, "/root/export/homeserver.db", incusapi.FilePut{Mode: 0o600, Content: strings.NewReader("db")}); err != nil {
		t.Fatal(err)
	}

	// The destination removed from outside: gone, saying so.
	if err := os.RemoveAll(dest); err != nil {
		t.Fatal(err)
	}
	rd = s.read(prior)
	if rd.Observation != providers.Absent {
		t.Fatalf("a removed destination reads %v %q", rd.Observation, rd.Detail)
	}
	wantContains(t, "the absence", rd.Detail, dest+" was removed from outside the runbook")
}

// TestFilePullIntoMissingDirectory: a pull whose destination's directory
// does not exist is refused by the plan, naming the directory and what to
// do, unless a step it depends on runs first (a note then); apply refuses
// the same way and writes nothing (no directory made, no temporary file).
// The directory is never made for it: a mistyped host path must not grow
// a tree.
func TestFilePullIntoMissingDirectory(t *testing.T) {
	t.Parallel()
	c := client(t)
	name := launch(t, c, "filenodir", true, nil)
	if err := c.PushFile(ctxT(t, 10*time.Second), name, "/root/dump.sql", incusapi.FilePut{Content: strings.NewReader("dump\n")}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "afile"), "not a directory\n", 0o644)
	p := providerIn(t, dir)
	listing := func() []string {
		var out []string
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			out = append(out, p)
			return err
		})
		return out
	}
	before := listing()
	for _, tc := range []struct {
		dest string
		want []string
	}{
		{"bakups/dump.sql", []string{"Destination Directory Missing", "the directory " + filepath.Join(dir, "bakups") + " does not exist",
			"the nearest that does is " + dir, "mkdir -p " + filepath.Join(dir, "bakups"), "fix the destination or the variable"}},
		{"a/b/c/dump.sql", []string{"the directory " + filepath.Join(dir, "a/b/c") + " does not exist", "the nearest that does is " + dir}},
		{"afile/dump.sql", []string{filepath.Join(dir, "afile") + " is a file, not a directory"}},
		{"nope/dump.sql.age", []string{"the directory " + filepath.Join(dir, "nope") + " does not exist"}},
	} {
		s := newStep(t, p, incus.File, "dump", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/root/dump.sql"), "destination": str(tc.dest)})
		wantDiag(t, s.plan(nil).Diagnostics, "Destination Directory Missing", append([]string{"incus_file.dump pulls " + name + ":/root/dump.sql into ./" + tc.dest}, tc.want[1:]...)...)
		r, _ := s.apply(ctxT(t, 30*time.Second), nil, nil)
		wantDiag(t, r.Diagnostics, "Destination Directory Missing", tc.want[1:]...)
		if after := listing(); !slices.Equal(before, after) {
			t.Errorf("a refused pull into %s changed the runbook directory: %v, was %v", tc.dest, after, before)
		}
	}
	// After a step it depends on, the directory may be made first: a
	// note in the plan, not an error.
	s := newStep(t, p, incus.File, "dump", map[string]cty.Value{"instance": str(name), "direction": str("pull"), "source": str("/root/dump.sql"), "destination": str("bakups/dump.sql")})
	r := p.Plan(ctxT(t, 60*time.Second), providers.PlanRequest{Type: incus.File, Addr: s.addr, Config: s.cfg, Action: providers.Create, AfterChanges: true})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("after a step that may make the directory: %v", err)
	}
	wantContains(t, "the plan", r.Diff, "+ pull "+name+":/root/dump.sql -> ./bakups/dump.sql", "note: the directory "+filepath.Join(dir, "bakups")+" is not there yet")
	// Made by then, the copy goes through.
	if err := os.Mkdir(filepath.Join(dir, "bakups"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := s.mustApply(r.Private, nil)
	if b, err := os.ReadFile(filepath.Join(dir, "bakups/dump.sql")); err != nil || string(b) != "dump\n" {
		t.Errorf("bakups/dump.sql = %q, %v", b, err)
	}
	s.revert(a.Revert)
}
