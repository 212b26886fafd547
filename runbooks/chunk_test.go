package runbooks

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// sameAsWhole fails unless the chunked parse of src, cut into pieces of
// size bytes, is nil (left to the whole parse) or exactly the whole
// parse's syntax tree. It reports whether the chunked parse took it.
func sameAsWhole(t *testing.T, src []byte, size int) bool {
	t.Helper()
	whole, diags := hclsyntax.ParseConfig(src, "main.hcl", hcl.InitialPos)
	got := parseChunked(src, "main.hcl", size)
	if got == nil {
		return false
	}
	if diags.HasErrors() {
		t.Fatalf("the chunked parse took input the whole parse rejects (%s):\n%s", diags.Error(), src)
	}
	if !reflect.DeepEqual(got.Body, whole.Body) {
		t.Fatalf("chunked (size %d) and whole parse differ at %s for:\n%s\nchunked: %s\nwhole:   %s", size, firstDiff(reflect.ValueOf(got.Body), reflect.ValueOf(whole.Body), "body", 0), src, dump(got.Body), dump(whole.Body))
	}
	return true
}

func dump(b hcl.Body) string {
	sb := b.(*hclsyntax.Body)
	var out []string
	out = append(out, fmt.Sprintf("body %v end %v", sb.SrcRange, sb.EndRange))
	for _, blk := range sb.Blocks {
		out = append(out, fmt.Sprintf("block %s %q type %v open %v close %v body %v end %v attrs %d blocks %d",
			blk.Type, blk.Labels, blk.TypeRange, blk.OpenBraceRange, blk.CloseBraceRange, blk.Body.SrcRange, blk.Body.EndRange, len(blk.Body.Attributes), len(blk.Body.Blocks)))
	}
	return strings.Join(out, "\n  ")
}

// TestChunkedParseIsTheWholeParse cuts every valid fixture and a generated
// big runbook at every possible size and compares the trees.
func TestChunkedParseIsTheWholeParse(t *testing.T) {
	paths, _ := filepath.Glob("testdata/valid/*.hcl")
	more, _ := filepath.Glob("testdata/valid/*/*.hcl")
	var srcs [][]byte
	for _, p := range append(paths, more...) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
	}
	srcs = append(srcs, []byte(bigRunbook(40)))
	// Shapes the scanner must follow: CRLF line ends, tabs, templates
	// with braces, quotes and directives, escaped interpolations, comments
	// after braces, non-ASCII text, a single-line block, a BOM.
	srcs = append(srcs,
		[]byte(strings.ReplaceAll(bigRunbook(12), "\n", "\r\n")),
		[]byte(strings.ReplaceAll(bigRunbook(12), "  ", "\t")),
		[]byte("\ufeff"+bigRunbook(6)),
		[]byte(`locals {
  a = "${jsonencode({ k = "}", l = ["{", "x"] })}"
  b = "$${not} %%{not} ${"nested ${"deep"}"}"
  c = "%{ if true }yes%{ else }no%{ endif }"
  d = { x = { y = [1, 2, { z = "}" }] } }
}

phase "é-ü" { # a comment after the brace
  description = "naïve — ünïcödé"
}
phase "p" {
  step "exec" "a" { command = ["true"] }
  step "exec" "b" {
    command = ["sh", "-c", "echo '${local.a}' } {"]
    /* } */
    depends_on = [exec.a] # }
  }
}
`))
	// The shapes above are ones the chunked parse must take, not leave to
	// the whole parse (or the comparison would prove nothing about them).
	for i, src := range srcs[len(srcs)-4:] {
		if !sameAsWhole(t, src, 1) {
			t.Errorf("shape %d was left to the whole parse:\n%s", i, src)
		}
	}
	taken := 0
	for _, src := range srcs {
		for _, size := range []int{1, 7, 64, 512, 4096} {
			if sameAsWhole(t, src, size) {
				taken++
			}
		}
	}
	if taken == 0 {
		t.Fatal("the chunked parse took none of the inputs: the comparison proves nothing")
	}
	// The generated runbook is exactly the shape that must be taken.
	if !sameAsWhole(t, []byte(bigRunbook(40)), 64) {
		t.Fatal("the chunked parse refused a plain generated runbook")
	}
}

func bigRunbook(n int) string {
	var b strings.Builder
	b.WriteString("# generated\nvariable \"x\" {\n  default = \"{not a brace}\"\n}\n\nphase \"p\" {\n  description = \"a ${var.x} b\"\n")
	for i := range n {
		fmt.Fprintf(&b, "  step \"exec\" \"s%d\" {\n    command = [\"sh\", \"-c\", \"echo '}' # %d\"]\n", i, i)
		if i > 0 {
			fmt.Fprintf(&b, "    depends_on = [exec.s%d] // after\n", i-1)
		}
		b.WriteString("    /* a\n       comment { */\n  }\n")
	}
	b.WriteString("}\n\nphase \"q\" {\n  after = [phase.p]\n}\n")
	return b.String()
}

// TestChunkedParseRefuses: shapes the splitter does not follow go to the
// whole parse.
func TestChunkedParseRefuses(t *testing.T) {
	for _, src := range []string{
		"phase \"p\" {\n  step \"exec\" \"a\" {\n    command = [<<EOT\nhi\nEOT\n    ]\n  }\n}\n",
		"phase \"p\" {\n  description = \"unterminated\n}\n",
		"phase \"p\" {\n  x = (1]\n}\n",
		"a = 1\na = 2\n",
		"phase \"p\" {\n  /* unterminated\n}\n",
	} {
		if f := parseChunked([]byte(src), "main.hcl", 1); f != nil {
			t.Errorf("the chunked parse took %q", src)
		}
	}
}

// FuzzChunkedParse: for any input the chunked parse takes, its tree is
// the whole parse's.
func FuzzChunkedParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*", "*.hcl"))
	more, _ := filepath.Glob(filepath.Join("testdata", "*", "*", "*.hcl"))
	for _, p := range append(seeds, more...) {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src, uint16(1))
		f.Add(src, uint16(100))
	}
	f.Add([]byte(bigRunbook(5)), uint16(30))
	f.Fuzz(func(t *testing.T, src []byte, size uint16) {
		sameAsWhole(t, src, int(size)+1)
	})
}

// firstDiff walks two values and names the first place they differ.
func firstDiff(a, b reflect.Value, path string, depth int) string {
	if depth > 60 {
		return ""
	}
	if a.IsValid() != b.IsValid() {
		return path + ": validity"
	}
	if !a.IsValid() {
		return ""
	}
	if a.Type() != b.Type() {
		return fmt.Sprintf("%s: type %s vs %s", path, a.Type(), b.Type())
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return path + ": nil"
			}
			return ""
		}
		return firstDiff(a.Elem(), b.Elem(), path, depth+1)
	case reflect.Struct:
		for i := range a.NumField() {
			if d := firstDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, depth+1); d != "" {
				return d
			}
		}
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return path + ": nil slice vs empty"
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: len %d vs %d", path, a.Len(), b.Len())
		}
		for i := range a.Len() {
			if d := firstDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1); d != "" {
				return d
			}
		}
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return path + ": nil map vs empty"
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: map len %d vs %d", path, a.Len(), b.Len())
		}
		for _, k := range a.MapKeys() {
			if d := firstDiff(a.MapIndex(k), b.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), depth+1); d != "" {
				return d
			}
		}
	default:
		if !reflect.DeepEqual(valueOf(a), valueOf(b)) {
			return fmt.Sprintf("%s: %v vs %v", path, valueOf(a), valueOf(b))
		}
	}
	return ""
}

func valueOf(v reflect.Value) any {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int8, reflect.Int16:
		return v.Int()
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint8, reflect.Uint16, reflect.Uintptr:
		return v.Uint()
	case reflect.Bool:
		return v.Bool()
	case reflect.Float64, reflect.Float32:
		return v.Float()
	}
	return v.Kind().String()
}
