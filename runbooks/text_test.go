package runbooks_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/runbooks"
)

// maxDiags is how many diagnostics the loader reports per file.
const maxDiags = 20

// A file that is not text is one error naming the file and where, not one
// per byte (a 40 KB file of NUL bytes gave 40,960 errors).
func TestNotText(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		src  string
		want []string
	}{
		"nul":         {strings.Repeat("\x00", 40<<10), []string{"main.hcl", "line 1, column 1", "NUL byte", "offset 0"}},
		"nul later":   {"phase \"a\" {\n}\nx = \"ab\x00\"\n", []string{"line 3, column 8", "NUL byte", "offset 21"}},
		"latin-1":     {"phase \"a\" {\n  description = \"caf\xe9\"\n}\n", []string{"line 2, column 21", "0xe9", "offset 32"}},
		"binary":      {string(bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0}, 20000)), []string{"line 1, column 1", "0x89"}},
		"utf-8 first": {"é\xff\x00", []string{"line 1, column 2", "0xff"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, diags := load(t, map[string]string{"main.hcl": tc.src}, runbooks.Options{})
			if len(diags) != 1 || diags[0].Summary != "File Is Not Text" {
				t.Fatalf("want one File Is Not Text error, got %d: %.500s", len(diags), diags.Err())
			}
			for _, w := range tc.want {
				if !strings.Contains(diags[0].Detail, w) {
					t.Errorf("detail %q lacks %q", diags[0].Detail, w)
				}
			}
		})
	}
}

// Thousands of mistakes in a file are reported as the first 20 and a count
// of the others.
func TestDiagnosticsCappedPerFile(t *testing.T) {
	t.Parallel()
	var a, b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&a, "bogus_%d = 1\n", i)
	}
	for i := range 3 {
		fmt.Fprintf(&b, "other_%d = 1\n", i)
	}
	_, diags := load(t, map[string]string{"a.hcl": a.String(), "b.hcl": b.String()}, runbooks.Options{})
	if len(diags) != 20+1+3 {
		t.Fatalf("want 20 + 1 + 3 diagnostics, got %d", len(diags))
	}
	last := diags[20]
	if last.Summary != "Too Many Errors" || !strings.Contains(last.Detail, "1,980 more errors in a.hcl") {
		t.Errorf("diagnostic 21 = %q: %q", last.Summary, last.Detail)
	}
	for _, d := range diags[21:] {
		if d.Subject == nil || d.Subject.Filename != "b.hcl" {
			t.Errorf("want the 3 errors of b.hcl after the count, got %q %v", d.Summary, d.Subject)
		}
	}
}

// Thousands of mistakes cost linear time: each "Did you mean" compared a
// name with every declared one, and the check for sensitive values walked
// every variable for each undeclared one (5,000 references to undeclared
// steps took 40 s; these 4,000 of each kind take well under a second).
func TestManyMistakesLinear(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	const n = 4000
	for i := range n {
		fmt.Fprintf(&b, "variable \"v%d\" { default = 1 }\n", i)
	}
	b.WriteString("phase \"a\" {\n")
	for i := range n {
		fmt.Fprintf(&b, "  step \"exec\" \"t%d\" { command = [exec.missing%d.y, var.w%d] }\n", i, i, i)
	}
	b.WriteString("}\n")
	start := time.Now()
	_, diags := load(t, map[string]string{"main.hcl": b.String()}, runbooks.Options{})
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("loading %d mistakes took %s", 2*n, d)
	}
	if len(diags) != maxDiags+1 || !strings.Contains(diags[maxDiags].Detail, "7,980 more errors") {
		t.Errorf("want %d diagnostics and a count of the rest, got %d: %s", maxDiags, len(diags), diags[len(diags)-1].Detail)
	}
}
