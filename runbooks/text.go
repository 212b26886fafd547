package runbooks

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// maxDiagsPerFile is how many problems are reported for one file; the rest
// are counted in one last diagnostic. A file of garbage would otherwise
// give one error per byte, each quoting the whole line.
const maxDiagsPerFile = 20

// notText reports a file that is not UTF-8 text (a NUL byte, or bytes that
// are not UTF-8) as one diagnostic at the first bad byte, instead of the
// parser's one error per byte. It returns nil for text.
func notText(src []byte, filename string) *hcl.Diagnostic {
	bad, what := -1, ""
	if i := bytes.IndexByte(src, 0); i >= 0 {
		bad, what = i, "a NUL byte"
	}
	if !utf8.Valid(src) {
		for i := 0; i < len(src) && (bad < 0 || i < bad); {
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				bad, what = i, fmt.Sprintf("the byte 0x%02x, which is not UTF-8", src[i])
				break
			}
			i += size
		}
	}
	if bad < 0 {
		return nil
	}
	line := 1 + bytes.Count(src[:bad], []byte{'\n'})
	col := 1 + utf8.RuneCount(src[bytes.LastIndexByte(src[:bad], '\n')+1:bad])
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "File Is Not Text",
		Detail: fmt.Sprintf("%s is not UTF-8 text: line %d, column %d has %s (byte offset %d). "+
			"Runbook and variable files must be UTF-8 text; remove the file or save it as UTF-8.", filename, line, col, what, bad),
		// No Subject: a snippet of a binary line would be garbage on the
		// terminal. The detail says where.
	}
}

// capDiags keeps the first maxDiagsPerFile diagnostics of each file (diags
// sorted by file) and replaces the rest by one that counts them.
func capDiags(diags hcl.Diagnostics) hcl.Diagnostics {
	out := diags[:0:0]
	file, count := "", 0
	flush := func() {
		if count > maxDiagsPerFile {
			out = append(out, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Too Many Errors",
				Detail:   fmt.Sprintf("And %s more errors in %s, not shown. Fix the ones above and run again.", thousands(count-maxDiagsPerFile), file),
			})
		}
	}
	for _, d := range diags {
		if d.Subject == nil {
			out = append(out, d)
			continue
		}
		if d.Subject.Filename != file {
			flush()
			file, count = d.Subject.Filename, 0
		}
		if count++; count <= maxDiagsPerFile {
			out = append(out, d)
		}
	}
	flush()
	return out
}

// thousands writes n with commas: 4,812.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
