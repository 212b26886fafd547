package incus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The passes run here against this machine's sh and tools (Debian's
// dash and GNU coreutils: what the old VMs have), through localGuest;
// sync_test.go runs them in a busybox container through the real
// daemon.

type localGuest struct{ runs int }

func (g *localGuest) run(ctx context.Context, argv []string, out io.Writer) error {
	g.runs++
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, stderr.String())
	}
	return nil
}

func (g *localGuest) read(_ context.Context, p string, max int64) ([]byte, bool, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if int64(len(b)) > max {
		return nil, false, errors.New("too large")
	}
	return b, err == nil, err
}

func (g *localGuest) write(_ context.Context, p string, b []byte) error {
	return os.WriteFile(p, b, 0o600)
}

// files writes files (path relative to dir -> content) with an old
// mtime, so that no pass takes them for files changed in its second.
func files(t *testing.T, dir string, fs map[string]string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for p, body := range fs {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(full, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// localState is where the local tests keep a destination's manifest:
// beside the test's directories, not in the host's /var/lib.
func localState(dst string) string { return filepath.Join(filepath.Dir(dst), "sync-state") }

func pass(t *testing.T, g guest, src, dst string, final bool, crit ...string) (*syncResult, error) {
	t.Helper()
	var log strings.Builder
	p := syncParams{src: src, dst: dst, state: localState(dst), final: final, critical: crit,
		logf:   func(f string, a ...any) { fmt.Fprintf(&log, f+"\n", a...) },
		intend: func(bool) error { return nil }}
	r, err := syncPass(context.Background(), g, p)
	t.Logf("%s pass log:\n%s", passName(final), log.String())
	return r, err
}

func mustPass(t *testing.T, g guest, src, dst string, final bool, crit ...string) *syncResult {
	t.Helper()
	r, err := pass(t, g, src, dst, final, crit...)
	if err != nil {
		t.Fatalf("%s pass: %v", passName(final), err)
	}
	return r
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSyncLocalWarmThenFinal(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "apps", "app.partial")
	files(t, src, map[string]string{
		"a.txt":         "alpha",
		"sub/b.txt":     "bravo",
		"sub/gone.txt":  "deleted before the final pass",
		"db/main.db":    "database v1",
		"keep/same.txt": "same",
	})
	if err := os.Symlink("sub/b.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	g := &localGuest{}
	w := mustPass(t, g, src, dst, false, "*.db")
	if w.files != 5 || w.copiedFiles != 4 {
		t.Errorf("warm pass: %d files, %d copied; want 5 and 4 (the database left)", w.files, w.copiedFiles)
	}
	if _, err := os.Stat(filepath.Join(dst, "db/main.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the warm pass copied the critical file: %v", err)
	}
	if !strings.HasPrefix(read(t, syncParams{dst: dst, state: localState(dst)}.manifestPath()), manifestMagic) {
		t.Errorf("no manifest of the destination")
	}
	// Between the passes: a changed file, a new one, a deleted one, and
	// the database changed without changing its size or mtime.
	st, _ := os.Stat(filepath.Join(src, "db/main.db"))
	files(t, src, map[string]string{"a.txt": "alpha, longer", "new.txt": "new"})
	os.Remove(filepath.Join(src, "sub/gone.txt"))
	os.WriteFile(filepath.Join(src, "db/main.db"), []byte("database v2"), 0o644)
	os.Chtimes(filepath.Join(src, "db/main.db"), st.ModTime(), st.ModTime())

	f := mustPass(t, g, src, dst, true, "*.db")
	for p, want := range map[string]string{"a.txt": "alpha, longer", "new.txt": "new", "db/main.db": "database v2", "keep/same.txt": "same"} {
		if got := read(t, filepath.Join(dst, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "sub/gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the final pass left a file the source no longer has: %v", err)
	}
	if tg, err := os.Readlink(filepath.Join(dst, "link")); err != nil || tg != "sub/b.txt" {
		t.Errorf("link: %q %v", tg, err)
	}
	if f.copiedFiles != 3 || f.files != 5 {
		t.Errorf("final pass: %d files, %d copied; want 5 and 3 (a.txt, new.txt, the database)", f.files, f.copiedFiles)
	}
	// Again: nothing to copy, verified.
	again := mustPass(t, g, src, dst, true, "*.db")
	if again.copiedFiles != 0 || again.manifest != f.manifest {
		t.Errorf("final pass again: %d copied, manifest %s (was %s)", again.copiedFiles, again.manifest, f.manifest)
	}
}

func TestSyncLocalDestinationChanged(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	files(t, src, map[string]string{"a": "1", "b": "2", "c": "3"})
	g := &localGuest{}
	mustPass(t, g, src, dst, false)
	os.Remove(filepath.Join(dst, "a"))
	os.WriteFile(filepath.Join(dst, "b"), []byte("22"), 0o644)
	os.WriteFile(filepath.Join(dst, "evil\nname"), []byte("x"), 0o644)
	_, err := pass(t, g, src, dst, true)
	var de *diffError
	if !errors.As(err, &de) {
		t.Fatalf("final pass on a changed destination: %v, want a diffError", err)
	}
	for _, want := range []string{`removed: "a"`, `changed: "b"`, `added: "evil\nname"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %s", err, want)
		}
	}
	if read(t, filepath.Join(dst, "b")) != "22" {
		t.Errorf("the failed final pass copied anyway")
	}
}

func TestSyncLocalHostileNames(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	hostile := []string{"new\nline", "it's \"quoted\"", "-rf", "--", "\xff\xfe latin", "sp ace", "$(echo pwned)", "back\\slash", "*"}
	fs := map[string]string{}
	for i, n := range hostile {
		fs[n] = fmt.Sprint("content ", i)
		fs["dir\n"+n+"/f"] = fmt.Sprint("nested ", i)
	}
	files(t, src, fs)
	g := &localGuest{}
	mustPass(t, g, src, dst, false)
	f := mustPass(t, g, src, dst, true)
	if f.files != int64(len(fs)) {
		t.Errorf("final pass: %d files, want %d", f.files, len(fs))
	}
	for p, want := range fs {
		if got := read(t, filepath.Join(dst, p)); got != want {
			t.Errorf("%q = %q, want %q", p, got, want)
		}
	}
	// One removed from the destination: named, quoted.
	os.Remove(filepath.Join(dst, "new\nline"))
	_, err := pass(t, g, src, dst, true)
	if err == nil || !strings.Contains(err.Error(), `"new\nline"`) || strings.Contains(err.Error(), "new\nline") {
		t.Errorf("final pass after a removal: %v; want the name quoted", err)
	}
}

// A link to a directory in the destination replaced by a file or by
// another link: the copy replaces the link, never writes into the
// directory it points to.
func TestSyncLocalReplacesLinks(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	files(t, src, map[string]string{"v1/a": "1", "v2/a": "2", "cur": "a file first"})
	if err := os.Symlink("v1", filepath.Join(src, "ln")); err != nil {
		t.Fatal(err)
	}
	g := &localGuest{}
	mustPass(t, g, src, dst, false)
	// Now cur is a link to a directory, and ln points elsewhere.
	os.Remove(filepath.Join(src, "cur"))
	os.Symlink("v1", filepath.Join(src, "cur"))
	os.Remove(filepath.Join(src, "ln"))
	os.Symlink("v2", filepath.Join(src, "ln"))
	mustPass(t, g, src, dst, true)
	// And back: cur a file again, over the link to v1.
	os.Remove(filepath.Join(src, "cur"))
	files(t, src, map[string]string{"cur": "a file again"})
	mustPass(t, g, src, dst, false)
	mustPass(t, g, src, dst, true)
	if got := read(t, filepath.Join(dst, "cur")); got != "a file again" {
		t.Errorf("cur = %q", got)
	}
	if tg, _ := os.Readlink(filepath.Join(dst, "ln")); tg != "v2" {
		t.Errorf("ln -> %q, want v2", tg)
	}
	entries, _ := os.ReadDir(filepath.Join(dst, "v1"))
	if len(entries) != 1 {
		t.Errorf("dst/v1 holds %d entries, want 1 (a copy went through a link): %v", len(entries), entries)
	}
}

// A difference names 20 files, then a count.
func TestSyncLocalNamesTwentyThenCounts(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	fs := map[string]string{}
	for i := range 25 {
		fs[fmt.Sprintf("f%02d", i)] = "x"
	}
	files(t, src, fs)
	g := &localGuest{}
	mustPass(t, g, src, dst, false)
	for i := range 25 {
		os.Remove(filepath.Join(dst, fmt.Sprintf("f%02d", i)))
	}
	_, err := pass(t, g, src, dst, true)
	if err == nil || !strings.Contains(err.Error(), `"f19"; and 5 more`) || strings.Contains(err.Error(), `"f20"`) {
		t.Errorf("final pass: %v; want 20 names then \"and 5 more\"", err)
	}
}

func TestSyncLocalColdFinal(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	files(t, src, map[string]string{"a": "1", "d/b": "2"})
	r := mustPass(t, &localGuest{}, src, dst, true, "*.db")
	if !r.cold || r.copiedFiles != 2 {
		t.Errorf("cold final pass: cold %v, %d copied", r.cold, r.copiedFiles)
	}
}

func TestParseListingRefuses(t *testing.T) {
	for name, recs := range map[string][]string{
		"escape":        {"R 0", "N 1", "./../x", "81a4 1 1 0 0", "Z"},
		"absolute":      {"R 0", "N 1", "/etc/passwd", "81a4 1 1 0 0", "Z"},
		"lines":         {"R 0", "N 2", "./a", "./b", "81a4 1 1 0 0", "Z"},
		"cut":           {"R 0", "N 1", "./a", "81a4 1 1 0 0"},
		"count":         {"R 0", "N 99999999999", "Z"},
		"overflow":      {"R 0", "N 9223372036854775807", "./a", "Z"},
		"negative size": {"R 0", "N 1", "./a", "81a4 -1 1 0 0", "Z"},
		"twice":         {"R 0", "N 1", "./a", "81a4 1 1 0 0", "N 1", "./a", "81a4 1 1 0 0", "Z"},
		"unknown":       {"R 0", "Q", "Z"},
		"after end":     {"R 0", "Z", "R 1"},
	} {
		if _, err := parseListing(recs, 1); err == nil {
			t.Errorf("%s: parsed %q", name, recs)
		}
	}
}

func FuzzParseListing(f *testing.F) {
	f.Add("T 5\x00R 0\x00N 1\x00.\x0041ed 4096 1 0 0\x00L\x00./l\x00t\x00Z")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseListing(strings.Split(s, "\x00"), 2)
		_, _ = parseManifest([]byte(s))
	})
}
