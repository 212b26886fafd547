package views_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
)

func parse(t *testing.T, src string) (map[string]*hcl.File, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "main.hcl", hcl.InitialPos)
	return map[string]*hcl.File{"main.hcl": f}, diags
}

// Diagnostics read as HCL's own writer prints them, values of the
// expression included.
func TestDiagnosticsAsHCLWrites(t *testing.T) {
	t.Parallel()
	src := "phase \"a\" {\n  x = [for s in [\"a\", \"b\"] : tonumber(s)]\n  y = 1 +\n}\n"
	files, diags := parse(t, src)
	body := files["main.hcl"].Body.(*hclsyntax.Body)
	_, more := body.Blocks[0].Body.Attributes["x"].Expr.Value(&hcl.EvalContext{})
	diags = append(diags, more...)
	diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Empty Range", Subject: &hcl.Range{
		Filename: "main.hcl", Start: hcl.Pos{Line: 1, Column: 7, Byte: 6}, End: hcl.Pos{Line: 1, Column: 7, Byte: 6}}})
	if len(diags) < 3 {
		t.Fatalf("want at least 3 diagnostics to compare, got %d", len(diags))
	}
	// The loader keeps only the bytes of its files (hence no ", in phase").
	files = map[string]*hcl.File{"main.hcl": {Body: hcl.EmptyBody(), Bytes: []byte(src)}}
	var want bytes.Buffer
	_ = hcl.NewDiagnosticTextWriter(&want, files, 78, false).WriteDiagnostics(diags)
	v, _, got := newView()
	v.SetFiles(map[string][]byte{"main.hcl": []byte(src)})
	v.Diagnostics(runbooks.Diagnostics(diags))
	if got.String() != want.String() {
		t.Errorf("got:\n%s\nwant (HCL's writer):\n%s", got, want.String())
	}
}

// A long line is quoted as a window of 120 columns around the error.
func TestDiagnosticSnippetCut(t *testing.T) {
	t.Parallel()
	line := "x = \"" + strings.Repeat("é", 20000) + "MARK" + strings.Repeat("z", 20000) + "\""
	files := map[string][]byte{"main.hcl": []byte(line + "\n")}
	at := strings.Index(line, "MARK")
	v, _, got := newView()
	v.SetFiles(files)
	v.Diagnostics(runbooks.Diagnostics(hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Here", Subject: &hcl.Range{
		Filename: "main.hcl", Start: hcl.Pos{Line: 1, Column: 20006, Byte: at}, End: hcl.Pos{Line: 1, Column: 20010, Byte: at + 4}}}}))
	var snippet string
	for _, l := range strings.Split(got.String(), "\n") {
		if strings.HasPrefix(l, "   1: ") {
			snippet = strings.TrimPrefix(l, "   1: ")
		}
	}
	if !strings.Contains(snippet, "MARK") || !strings.HasPrefix(snippet, "…é") || !strings.HasSuffix(snippet, "z…") {
		t.Errorf("snippet should be a window around MARK with ellipses: %q", snippet)
	}
	if n := len([]rune(snippet)); n > 122 {
		t.Errorf("snippet is %d columns wide, want at most 120 and two ellipses", n)
	}
}

// Control characters of a source line do not reach the terminal.
func TestDiagnosticSnippetPrintable(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{"main.hcl": []byte("x = \"\x1b[2J\x01\"\t# tab\n")}
	v, _, got := newView()
	v.SetFiles(files)
	v.Diagnostics(runbooks.Diagnostics(hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Here", Subject: &hcl.Range{
		Filename: "main.hcl", Start: hcl.Pos{Line: 1, Column: 1, Byte: 0}, End: hcl.Pos{Line: 1, Column: 2, Byte: 1}}}}))
	if strings.ContainsAny(got.String(), "\x1b\x01") || !strings.Contains(got.String(), "\ufffd[2J\ufffd\"\t# tab") {
		t.Errorf("snippet: %q", got.String())
	}
}

// Rendering N diagnostics is linear: 2,000 errors over a 2,000-line file
// used to take 25 s, as each one scanned the file from the start.
func TestDiagnosticsLinear(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&src, "bogus_%d = %q\n", i, strings.Repeat("v", 300))
	}
	files := map[string][]byte{"main.hcl": []byte(src.String())}
	var diags hcl.Diagnostics
	off := 0
	for i, l := range strings.SplitAfter(src.String(), "\n")[:2000] {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported Argument", Detail: "No.",
			Subject: &hcl.Range{Filename: "main.hcl", Start: hcl.Pos{Line: i + 1, Column: 1, Byte: off}, End: hcl.Pos{Line: i + 1, Column: 6, Byte: off + 5}}})
		off += len(l)
	}
	v, _, got := newView()
	v.SetFiles(files)
	pd := runbooks.Diagnostics(diags)
	start := time.Now()
	v.Diagnostics(pd)
	// HCL's writer needs ~20 s here on this machine; a linear one a few ms.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("2,000 diagnostics took %s", d)
	}
	if n := strings.Count(got.String(), "Error: Unsupported Argument"); n != 2000 {
		t.Errorf("%d diagnostics written, want 2000", n)
	}
}

// Every diagnostic and error passes the scrubber.
func TestDiagnosticsScrubbed(t *testing.T) {
	t.Parallel()
	v, _, got := newView()
	v.SetFiles(map[string][]byte{"main.hcl": []byte("x = \"hunter2\"\n")})
	v.SetScrubber(func(s string) string { return strings.ReplaceAll(s, "hunter2", "(sensitive)") })
	v.Diagnostics(runbooks.Diagnostics(hcl.Diagnostics{
		{Severity: hcl.DiagError, Summary: "Bad hunter2", Detail: "hunter2 is wrong.", Subject: &hcl.Range{Filename: "main.hcl", Start: hcl.Pos{Line: 1, Column: 1}, End: hcl.Pos{Line: 1, Column: 2, Byte: 1}}},
		{Severity: hcl.DiagError, Summary: "Elsewhere", Detail: "hunter2", Subject: &hcl.Range{Filename: "other.hcl"}},
	}))
	v.Error(fmt.Errorf("failed with hunter2"))
	if strings.Contains(got.String(), "hunter2") || strings.Count(got.String(), "(sensitive)") != 5 {
		t.Errorf("not scrubbed:\n%s", got)
	}
}

// A diagnostic or an error quoting what a guest printed shows its
// terminal escapes as text: they set no title and clear nothing.
func TestDiagnosticsShowEscapesAsText(t *testing.T) {
	t.Parallel()
	v, _, got := newView()
	v.Diagnostics(phases.Errorf("Command Failed \x1b[2J", "Last lines of output:\n  \x1b]0;pwned\x07 \u009b1A"))
	v.Error(fmt.Errorf("guest said \x1b[31mred"))
	if strings.ContainsAny(got.String(), "\x1b\x07\u009b") || !strings.Contains(got.String(), `\x1b]0;pwned\a \u009b1A`) || !strings.Contains(got.String(), `\x1b[31mred`) {
		t.Errorf("escapes reach the terminal:\n%q", got)
	}
}
