package incus

import (
	"bytes"
	"strings"
	"testing"
)

// TestLines: each stream is cut into whole lines (a stdout fragment is
// never glued to a stderr one), a line without end is cut at maxLine, the
// rest is flushed at the end, and the tail keeps the last lines.
func TestLines(t *testing.T) {
	var log bytes.Buffer
	l := &lines{w: &log}
	out, errs := l.stream("stdout"), l.stream("stderr")
	out.Write([]byte("one\ntw"))
	errs.Write([]byte("err\n"))
	out.Write([]byte("o\n"))
	long := strings.Repeat("x", maxLine+10)
	out.Write([]byte(long))
	errs.Write([]byte("no end"))
	l.flush()
	want := "one\nerr\ntwo\n" + long[:maxLine] + "\n" + "xxxxxxxxxx\nno end\n"
	if log.String() != want {
		t.Errorf("log = %q, want %q", log.String(), want)
	}
	if tail := l.tail(); !strings.HasSuffix(tail, "\n  xxxxxxxxxx\n  no end") {
		t.Errorf("tail = %q", tail)
	}
}
