package local

import (
	"io"
	"strings"
	"unicode/utf8"

	"github.com/homelab-migrate/migrate/secret"
)

// tailSize is how much of a command's last output is kept for the error
// message when it fails.
const tailSize = 2048

// tailLines is how many of the last lines an error message shows.
const tailLines = 8

// output is where a command's stdout and stderr go: the log writer (the
// SDK's, which replaces secrets line by line) and a small ring of the last
// bytes for error messages (scrubbed with the diagnostic). os/exec gives
// one goroutine and one pipe to it (stdout and stderr are the same
// writer), so it needs no lock.
type output struct {
	log   io.Writer
	scrub *secret.Scrubber // what the tail must not start inside of
	ring  [tailSize]byte
	n     int // bytes put in ring; once it wrapped, folded into [2*tailSize, 3*tailSize)
}

func newOutput(log io.Writer, scrub *secret.Scrubber) *output {
	return &output{log: log, scrub: scrub}
}

// Write never fails: a broken log must not kill the command through
// SIGPIPE or EPIPE.
func (o *output) Write(p []byte) (int, error) {
	o.emit(p)
	return len(p), nil
}

func (o *output) emit(p []byte) {
	if len(p) == 0 {
		return
	}
	_, _ = o.log.Write(p)
	if len(p) >= tailSize {
		copy(o.ring[:], p[len(p)-tailSize:])
		if o.n > 0 || len(p) > tailSize {
			o.n = 2 * tailSize // the ring from its start, and something before it
		} else {
			o.n = tailSize
		}
		return
	}
	for len(p) > 0 {
		i := o.n % tailSize
		c := copy(o.ring[i:], p)
		p = p[c:]
		o.n += c
	}
	if o.n >= 2*tailSize {
		o.n = o.n%tailSize + 2*tailSize // wrapped: more than tailSize, whatever the place
	}
}

// tail returns the last lines of output, indented for a diagnostic.
func (o *output) tail() string {
	var b []byte
	if o.n <= tailSize {
		b = o.ring[:o.n]
	} else {
		i := o.n % tailSize
		b = append(append(make([]byte, 0, tailSize), o.ring[i:]...), o.ring[:i]...)
	}
	cut := o.n > tailSize
	if cut {
		// The ring may begin inside a secret, whose end alone the
		// diagnostic's scrubbing would not know: what a secret begun
		// before the ring can cover is dropped.
		b = b[min(len(b), max(o.scrub.Longest()-1, 0)):]
	}
	text := strings.TrimRight(strings.ToValidUTF8(string(b), string(utf8.RuneError)), "\n")
	if text == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	if len(lines) > tailLines {
		lines, cut = lines[len(lines)-tailLines:], true
	} else if cut && len(lines) > 1 {
		lines = lines[1:] // the first line is a fragment
	}
	var sb strings.Builder
	if cut {
		sb.WriteString("\n  ...")
	}
	for _, l := range lines {
		sb.WriteString("\n  ")
		sb.WriteString(strings.TrimRight(l, "\r"))
	}
	return sb.String()
}
