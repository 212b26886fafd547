package secret

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// Scrubber replaces known secrets in text with phases.Redacted. The zero
// value scrubs every non-empty secret; it is safe for concurrent use.
type Scrubber struct {
	// Min is the shortest secret worth scrubbing: shorter strings would
	// turn up in text by chance. Zero scrubs every non-empty secret.
	Min int
	// Filter, when set, runs after the replacement: a provider that
	// knows where its secrets stand (YAML keys of a config) adds it.
	Filter func(string) string

	mu   sync.RWMutex
	seen map[string]bool
	rep  *strings.Replacer
}

// Add learns secrets, in their own form and as they appear quoted inside
// JSON or a %q, and the longest first, so that a secret containing
// another is replaced whole.
func (s *Scrubber) Add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, x := range secrets {
		if len(strings.TrimSpace(x)) < max(s.Min, 1) {
			continue
		}
		forms := []string{x}
		if q := fmt.Sprintf("%q", x); q[1:len(q)-1] != x {
			forms = append(forms, q[1:len(q)-1])
		}
		forms = append(forms, pieces(x)...)
		for _, f := range forms {
			if !s.seen[f] {
				if s.seen == nil {
					s.seen = map[string]bool{}
				}
				s.seen[f] = true
				changed = true
			}
		}
	}
	if !changed {
		return
	}
	list := make([]string, 0, len(s.seen))
	for x := range s.seen {
		list = append(list, x)
	}
	sort.Slice(list, func(i, j int) bool {
		if len(list[i]) != len(list[j]) {
			return len(list[i]) > len(list[j])
		}
		return list[i] < list[j]
	})
	pairs := make([]string, 0, 2*len(list))
	for _, x := range list {
		pairs = append(pairs, x, phases.Redacted)
	}
	s.rep = strings.NewReplacer(pairs...)
}

// MinPiece is the shortest word of a longer secret that is scrubbed on
// its own. A sensitive value often reaches a command inside a larger
// string ("sh -c 'echo ${upper(var.tok)}'"), and the command prints only
// the derived word: that word is as secret as the whole. Shorter words
// ("sh", "echo", "exit") would redact ordinary text.
const MinPiece = 8

// pieces are the words of a secret that holds separators (white space,
// quotes, shell punctuation, '='), at least MinPiece bytes long.
func pieces(x string) []string {
	words := strings.FieldsFunc(x, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune("\"'`;|&<>()=,", r)
	})
	if len(words) < 2 {
		return nil
	}
	var out []string
	for _, w := range words {
		if len(w) >= MinPiece {
			out = append(out, w)
		}
	}
	return out
}

// AddMarked learns every string (and number) inside the parts of v marked
// phases.SensitiveMark.
func (s *Scrubber) AddMarked(v cty.Value) { s.Add(Marked(v)...) }

// AddValue learns every string (and number) inside v, marked or not: for
// values known to be secret as a whole.
func (s *Scrubber) AddValue(v cty.Value) { s.Add(leaves(v)...) }

// Active reports whether there is anything to scrub.
func (s *Scrubber) Active() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rep != nil || s.Filter != nil
}

// Text returns t with every known secret replaced.
func (s *Scrubber) Text(t string) string {
	if t == "" {
		return t
	}
	s.mu.RLock()
	rep := s.rep
	s.mu.RUnlock()
	if rep != nil {
		t = rep.Replace(t)
	}
	if s.Filter != nil {
		t = s.Filter(t)
	}
	return t
}

// Diags scrubs the text of d (summaries, details, the values of an
// expression) in place, and returns it.
func (s *Scrubber) Diags(d phases.Diagnostics) phases.Diagnostics {
	for i := range d {
		d[i].Summary = s.Text(d[i].Summary)
		d[i].Detail = s.Text(d[i].Detail)
		for j, v := range d[i].Values {
			d[i].Values[j] = s.Text(v)
		}
	}
	return d
}

// Marked lists the strings (and numbers, in their decimal form) inside the
// parts of v marked phases.SensitiveMark.
func Marked(v cty.Value) []string {
	if v == cty.NilVal {
		return nil
	}
	var found []string
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return true, nil
		}
		found = append(found, leaves(x)...)
		return false, nil
	})
	return found
}

func leaves(v cty.Value) []string {
	if v == cty.NilVal {
		return nil
	}
	plain, _ := v.UnmarkDeep()
	var out []string
	_ = cty.Walk(plain, func(_ cty.Path, y cty.Value) (bool, error) {
		if !y.IsKnown() || y.IsNull() {
			return false, nil
		}
		switch y.Type() {
		case cty.String:
			out = append(out, y.AsString())
		case cty.Number:
			out = append(out, y.AsBigFloat().Text('f', -1))
		}
		return true, nil
	})
	return out
}

// Writer scrubs what is written to it line by line, so that a secret split
// across two writes is still caught; Flush writes a last partial line.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	buf   []byte
	scrub *Scrubber
}

// NewWriter returns a Writer to w (io.Discard when nil).
func NewWriter(w io.Writer, s *Scrubber) *Writer {
	if w == nil {
		w = io.Discard
	}
	return &Writer{w: w, scrub: s}
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i+1])
		w.buf = w.buf[i+1:]
		if _, err := io.WriteString(w.w, w.scrub.Text(line)); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Flush writes what is left of a last line without a newline.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(w.w, w.scrub.Text(string(w.buf)))
	w.buf = nil
	return err
}

// Printf writes one line.
func (w *Writer) Printf(format string, args ...any) {
	fmt.Fprintf(w, format+"\n", args...)
}

// Merge learns every secret o knows.
func (s *Scrubber) Merge(o *Scrubber) {
	o.mu.RLock()
	list := make([]string, 0, len(o.seen))
	for x := range o.seen {
		list = append(list, x)
	}
	o.mu.RUnlock()
	s.Add(list...)
}
