package runbooks_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/views"
)

// fixture loads testdata/<kind>/<name>: a single .hcl file (alone, in a
// MapFS) or a directory (through os.DirFS).
func fixture(t *testing.T, kind, name string) (*runbooks.Loader, *phases.Runbook, phases.Diagnostics) {
	t.Helper()
	p := filepath.Join("testdata", kind, name)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	var fsys fs.FS
	dir, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.IsDir() {
		fsys = os.DirFS(p)
	} else {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fsys = fstest.MapFS{name: {Data: src}}
		dir = filepath.Dir(dir)
	}
	l := runbooks.NewLoader(fsys, runbooks.Options{
		Dir:     dir,
		Schemas: testSchemas(),
		Environ: []string{"HOME=/home/test"},
	})
	rb, diags := l.Load()
	return l, rb, diags
}

func fixtureNames(t *testing.T, kind string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", kind))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".hcl") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no fixtures in testdata/%s", kind)
	}
	return names
}

func render(l *runbooks.Loader, diags phases.Diagnostics) string {
	var b bytes.Buffer
	v := views.New(views.Options{Stdout: &b, Stderr: &b, Width: 100})
	v.SetFiles(l.Files())
	v.Diagnostics(diags)
	return b.String()
}

// TestValid loads every fixture in testdata/valid: no diagnostics at all,
// and every step, check and provider evaluates without errors at plan time.
func TestValid(t *testing.T) {
	t.Parallel()
	for _, name := range fixtureNames(t, "valid") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, rb, diags := fixture(t, "valid", name)
			if len(diags) > 0 {
				t.Fatalf("unexpected diagnostics:\n%s", render(l, diags))
			}
			if len(rb.Phases) == 0 {
				t.Fatal("no phases loaded")
			}
			for _, p := range rb.Providers {
				if _, d := p.Config.Evaluate(nil); d.HasErrors() {
					t.Errorf("provider %s: %v", p.Key(), d.Err())
				}
			}
			for _, s := range rb.AllSteps() {
				if s.Provider == "" {
					t.Errorf("%s has no provider", s.Addr)
				}
				if _, d := s.Config.Evaluate(nil); d.HasErrors() {
					t.Errorf("%s: %v", s.Addr, d.Err())
				}
			}
		})
	}
}

// TestInvalid loads every fixture in testdata/invalid. A line ending in
// "# ERROR: Summary" (several separated by " | ") expects exactly those
// error diagnostics on that line; any other error fails the test.
func TestInvalid(t *testing.T) {
	t.Parallel()
	for _, name := range fixtureNames(t, "invalid") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want := expectedErrors(t, filepath.Join("testdata", "invalid", name))
			l, _, diags := fixture(t, "invalid", name)
			got := map[int][]string{}
			for _, d := range diags {
				if d.Severity != phases.Error {
					continue
				}
				if d.Subject == nil {
					t.Errorf("error without a subject: %s: %s", d.Summary, d.Detail)
					continue
				}
				got[d.Subject.StartLine] = append(got[d.Subject.StartLine], d.Summary)
			}
			lines := map[int]bool{}
			for line := range want {
				lines[line] = true
			}
			for line := range got {
				lines[line] = true
			}
			for line := range lines {
				w, g := want[line], got[line]
				sort.Strings(w)
				sort.Strings(g)
				if strings.Join(w, " | ") != strings.Join(g, " | ") {
					t.Errorf("line %d: want errors %q, got %q", line, w, g)
				}
			}
			if t.Failed() || os.Getenv("RUNBOOKS_SHOW_DIAGS") != "" {
				t.Logf("all diagnostics:\n%s", render(l, diags))
			}
		})
	}
}

func expectedErrors(t *testing.T, p string) map[int][]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[int][]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		_, marks, ok := strings.Cut(sc.Text(), "# ERROR: ")
		if !ok {
			continue
		}
		for _, m := range strings.Split(marks, " | ") {
			want[line] = append(want[line], strings.TrimSpace(m))
		}
	}
	if len(want) == 0 {
		t.Fatal(fmt.Sprintf("%s marks no errors", p))
	}
	return want
}
