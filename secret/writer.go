package secret

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxLine is the longest line a Writer passes on whole. A longer one is
// cut into lines of at most this length, so that a command printing
// hundreds of megabytes without a newline costs bounded memory and
// linear time.
const MaxLine = 64 << 10

// cutNote goes before the first piece of a line that was cut.
var cutNote = fmt.Sprintf("(the next line is longer than %d KiB: it is cut into lines of %d KiB)\n", MaxLine>>10, MaxLine>>10)

// Writer scrubs what is written to it and passes it on by whole lines,
// so that a secret split across two writes is still caught; Flush passes
// on a last partial line. It holds back at most MaxLine bytes and the
// longest secret: a longer line is cut where no secret straddles the
// cut, and lines that may be the beginning of a secret spanning lines
// wait until it is there, or cannot be any more.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	scrub   *Scrubber
	buf     []byte // what is not passed on yet
	cutting bool   // the last piece passed on was cut from a longer line
}

// NewWriter returns a Writer to w (io.Discard when nil) scrubbing with
// s (nothing when nil).
func NewWriter(w io.Writer, s *Scrubber) *Writer {
	if w == nil {
		w = io.Discard
	}
	if s == nil {
		s = &Scrubber{}
	}
	return &Writer{w: w, scrub: s}
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		// Never more than a cut's worth at a time: the buffer stays bounded.
		take := min(len(p), max(MaxLine+w.scrub.Longest()-len(w.buf), 1))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if err := w.pass(false); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Flush passes on what is left of a last line without a newline.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pass(true)
}

// Printf writes one line.
func (w *Writer) Printf(format string, args ...any) {
	fmt.Fprintf(w, format+"\n", args...)
}

// pass passes on, scrubbed, what no secret still to come can reach;
// final passes on everything.
func (w *Writer) pass(final bool) error {
	longest, multiline := w.scrub.bounds()
	from := 0
	var err error
	for from < len(w.buf) && err == nil {
		rest := w.buf[from:]
		c, cut := next(w.scrub, rest, longest, multiline, final)
		if c == 0 {
			break
		}
		err = w.emit(rest[:c], cut)
		from += c
	}
	if from > 0 {
		w.buf = w.buf[:copy(w.buf, w.buf[from:])]
	}
	return err
}

// next says how much of b to pass on now, and whether that is a piece
// cut from a longer line: whole lines, up to the last that may not be the
// beginning of a secret spanning lines; else, when b is longer than a
// line, a piece of about MaxLine that no secret straddles, once b holds
// the longest secret beyond the cut.
func next(s *Scrubber, b []byte, longest int, multiline []string, final bool) (int, bool) {
	if c := lastLineEnd(b, min(len(b), MaxLine+1), multiline); c > 0 {
		return c, false
	}
	switch {
	case len(b) > MaxLine && (final || len(b) >= MaxLine+longest):
		return s.safeCut(b, MaxLine), true
	case final:
		return len(b), false
	}
	return 0, false // a line not whole yet, or a secret may straddle the cut
}

// lastLineEnd is the end of the last line of b[:end] after which no
// secret spanning lines may go on (0: none).
func lastLineEnd(b []byte, end int, multiline []string) int {
	for end > 0 {
		i := bytes.LastIndexByte(b[:end], '\n')
		if i < 0 {
			return 0
		}
		if !mayGoOn(b, i+1, multiline) {
			return i + 1
		}
		end = i
	}
	return 0
}

// mayGoOn reports whether one of the forms (each spanning lines) is, or
// may become once more is written, in b across c, just after a newline:
// whether the text before c ends with the part of a form up to one of its
// newlines, and the text after c, so far, goes on as the form does.
func mayGoOn(b []byte, c int, forms []string) bool {
	for _, f := range forms {
		for j := strings.IndexByte(f, '\n'); j >= 0 && j < len(f)-1; {
			start := c - 1 - j // where f would begin, its newline j at c-1
			if start >= 0 {
				seen := b[start:min(len(b), start+len(f))]
				if string(seen) == f[:len(seen)] {
					return true
				}
			}
			k := strings.IndexByte(f[j+1:], '\n')
			if k < 0 {
				break
			}
			j += 1 + k
		}
	}
	return false
}

func (w *Writer) emit(piece []byte, cut bool) error {
	if cut && !w.cutting {
		if _, err := io.WriteString(w.w, cutNote); err != nil {
			return err
		}
	}
	w.cutting = cut
	text := w.scrub.Text(string(piece))
	if cut {
		text += "\n"
	}
	_, err := io.WriteString(w.w, text)
	return err
}

// bounds are the length of the longest form and the forms that span
// lines.
func (s *Scrubber) bounds() (longest int, multiline []string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.longest, s.multiline
}

// safeCut is where to cut b, near at and not after it unless a secret
// longer than at begins b: at a rune's start, and where no secret
// straddles the cut. b holds the longest secret beyond at.
func (s *Scrubber) safeCut(b []byte, at int) int {
	c := at
	for c > at-utf8.UTFMax && c > 0 && !utf8.RuneStart(b[c]) {
		c--
	}
	for {
		start, end, across := s.straddling(b, c)
		switch {
		case !across:
			return c
		case start == 0:
			return end // a secret longer than a line: passed on whole
		}
		c = start
	}
}

// straddling finds the secrets that begin before c and end after it in
// b, and returns the first one's start and the furthest end.
func (s *Scrubber) straddling(b []byte, c int) (start, end int, found bool) {
	s.mu.RLock()
	list, longest := s.list, s.longest
	s.mu.RUnlock()
	if longest < 2 {
		return c, c, false // nothing to straddle a cut
	}
	lo := max(0, c-longest+1)
	window := string(b[lo:min(len(b), c+longest-1)])
	start = c
	for _, f := range list {
		for from := max(0, c-len(f)+1-lo); from < len(window); from++ {
			i := strings.Index(window[from:], f)
			if i < 0 || lo+from+i >= c {
				break
			}
			at := lo + from + i
			if at+len(f) > c {
				found = true
				start, end = min(start, at), max(end, at+len(f))
			}
			from += i
		}
	}
	return start, end, found
}
