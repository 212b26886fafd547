package secret_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// lineCap is the longest line a Writer passes on, as the README says.
const lineCap = 64 << 10

// lineStats counts what a Writer passes on, keeping nothing but the
// longest line and the last bytes.
type lineStats struct {
	total, longest, cur, lines int
	text                       bytes.Buffer // all of it, when small
	keep                       bool
}

func (l *lineStats) Write(p []byte) (int, error) {
	for _, c := range p {
		l.cur++
		if c == '\n' {
			l.longest, l.cur = max(l.longest, l.cur), 0
			l.lines++
		}
	}
	l.longest = max(l.longest, l.cur)
	l.total += len(p)
	if l.keep {
		l.text.Write(p)
	}
	return len(p), nil
}

// TestWriterIsBoundedOnAHugeLine: 300 MB without a newline, as a command
// printing a file with no line ends does, passes through a Writer that
// never holds more than a line's cap and the longest secret, and comes
// out as lines of at most the cap, with a note that the line was cut.
func TestWriterIsBoundedOnAHugeLine(t *testing.T) {
	t.Parallel()
	var s secret.Scrubber
	s.Add("CANARY-bounded-0123456789")
	var out lineStats
	w := secret.NewWriter(&out, &s)
	chunk := bytes.Repeat([]byte("a"), 32<<10)            // what os/exec copies at a time
	bound := lineCap + 4*len("CANARY-bounded-0123456789") // the cap and the longest form of the secret
	const total = 300 << 20
	for n := 0; n < total; n += len(chunk) {
		w.Write(chunk)
		if held := secret.Held(w); held > bound {
			t.Fatalf("after %d bytes the writer holds %d bytes, more than the line cap and the longest secret (%d)", n+len(chunk), held, bound)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.longest > lineCap+1 {
		t.Errorf("a line of %d bytes was passed on; the cap is %d", out.longest, lineCap)
	}
	if out.total < total || out.lines < total/lineCap-1 {
		t.Errorf("%d bytes in %d lines passed on, want all %d bytes cut into lines", out.total, out.lines, total)
	}
}

// TestWriterCutsWhereNoSecretStraddles: a secret placed across the cut of
// a long line, at every offset, is still replaced whole; the log says
// the line was cut.
func TestWriterCutsWhereNoSecretStraddles(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-straddle-9f3e"
	var s secret.Scrubber
	s.Add(canary)
	for k := 0; k <= len(canary); k++ {
		var out lineStats
		out.keep = true
		w := secret.NewWriter(&out, &s)
		line := strings.Repeat("x", lineCap-k) + canary + strings.Repeat("y", lineCap) + "\n"
		for len(line) > 0 { // in writes that split the secret too
			n := min(len(line), 4093)
			w.Write([]byte(line[:n]))
			line = line[n:]
		}
		w.Flush()
		got := out.text.String()
		if strings.Count(got, phases.Redacted) != 1 || strings.Contains(got, canary[:6]) || strings.Contains(got, canary[len(canary)-6:]) {
			t.Fatalf("secret %d bytes before the cut: not replaced whole:\n...%s...", k, around(got, "CANARY", "straddle", phases.Redacted))
		}
		if !strings.Contains(got, "longer than 64 KiB") || out.longest > lineCap+1 {
			t.Errorf("secret %d bytes before the cut: no note of the cut, or a line of %d bytes", k, out.longest)
		}
	}
}

// around shows the text near the first of marks found.
func around(text string, marks ...string) string {
	for _, m := range marks {
		if i := strings.Index(text, m); i >= 0 {
			return text[max(0, i-20):min(len(text), i+40)]
		}
	}
	return "(none)"
}

// TestWriterCatchesASecretSplitAcrossLines: a secret of several lines
// (a key, a file) printed among other lines, in writes that split it, is
// replaced whole although each of its lines is short and ordinary.
func TestWriterCatchesASecretSplitAcrossLines(t *testing.T) {
	t.Parallel()
	const key = "-----K-----\nab12\ncd34\n-----E-----"
	var s secret.Scrubber
	s.Add(key)
	var out lineStats
	out.keep = true
	w := secret.NewWriter(&out, &s)
	text := "before\nthe key:\n" + key + "\nafter\n"
	for i := 0; i < len(text); i += 3 {
		w.Write([]byte(text[i:min(len(text), i+3)]))
	}
	w.Flush()
	got := out.text.String()
	if strings.Contains(got, "ab12") || strings.Contains(got, "cd34") || !strings.Contains(got, "the key:\n"+phases.Redacted+"\nafter\n") {
		t.Errorf("a secret split across lines was passed on:\n%s", got)
	}
	if !strings.HasPrefix(got, "before\n") {
		t.Errorf("lines before the secret were lost:\n%s", got)
	}
}

// TestWriterPassesALineOfTheCapWhole: a line of exactly the cap is not
// cut, so that a Writer behind another passes its pieces as they are.
func TestWriterPassesALineOfTheCapWhole(t *testing.T) {
	t.Parallel()
	var out lineStats
	out.keep = true
	w := secret.NewWriter(&out, &secret.Scrubber{})
	line := strings.Repeat("z", lineCap) + "\n"
	w.Write([]byte(line + line))
	if got := out.text.String(); got != line+line {
		t.Errorf("two lines of the cap came out as %d bytes in %d lines", len(got), strings.Count(got, "\n"))
	}
}

// TestWriterCutsALongLineWithoutSecrets: with nothing to scrub, a long
// line is cut all the same.
func TestWriterCutsALongLineWithoutSecrets(t *testing.T) {
	t.Parallel()
	var out lineStats
	w := secret.NewWriter(&out, &secret.Scrubber{})
	w.Write(bytes.Repeat([]byte("q"), 3*lineCap+5))
	w.Flush()
	if out.longest > lineCap+1 || out.total < 3*lineCap+5 {
		t.Errorf("%d bytes passed on, the longest line %d", out.total, out.longest)
	}
}

// TestWriterHoldsOnlyWhatMayBeginASecret: with a secret of several lines
// known, other lines pass at once; lines that begin as the secret does
// wait, and pass as they are when the text goes another way.
func TestWriterHoldsOnlyWhatMayBeginASecret(t *testing.T) {
	t.Parallel()
	var s secret.Scrubber
	s.Add("BEGIN\nab12\ncd34\nEND")
	var out lineStats
	out.keep = true
	w := secret.NewWriter(&out, &s)
	step := func(write, want string) {
		t.Helper()
		w.Write([]byte(write))
		if got := out.text.String(); got != want {
			t.Errorf("after %q: passed on %q, want %q", write, got, want)
		}
	}
	step("hello\n", "hello\n")
	step("BEGIN\n", "hello\n")
	step("ab12\n", "hello\n")
	step("zz\n", "hello\nBEGIN\nab12\nzz\n")
	step("BEGIN\nab12\ncd34\nEND\nbye\n", "hello\nBEGIN\nab12\nzz\n"+phases.Redacted+"\nbye\n")
}

// TestWriterIsBoundedAfterASecretOfSeveralLines: a secret spanning lines,
// then a long line without a newline, is held no longer than the rest.
func TestWriterIsBoundedAfterASecretOfSeveralLines(t *testing.T) {
	t.Parallel()
	const key = "BEGIN\nab12\ncd34\nEND"
	var s secret.Scrubber
	s.Add(key)
	var out lineStats
	out.keep = true
	w := secret.NewWriter(&out, &s)
	w.Write([]byte("the key: " + key))
	chunk := bytes.Repeat([]byte("x"), 4096)
	for range 64 {
		w.Write(chunk)
		if held := secret.Held(w); held > lineCap+4*len(key) {
			t.Fatalf("the writer holds %d bytes", held)
		}
	}
	w.Flush()
	if got := out.text.String(); strings.Contains(got, "ab12") || !strings.Contains(got, "the key: "+phases.Redacted) {
		t.Errorf("the secret was passed on, or lost: %.60q", got)
	}
}
