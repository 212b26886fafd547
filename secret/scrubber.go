package secret

import (
	"sort"
	"strings"
	"sync"

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
	list []string // seen, the longest first
	rep  *strings.Replacer
	// longest is the length of the longest form; multiline lists the
	// forms that span lines, which a Writer may have to wait for.
	longest   int
	multiline []string
}

// Add learns secrets, in their own form and in the forms they take on
// the way out (quoted, escaped, encoded: forms.go), the longest first, so
// that a secret containing another is replaced whole.
func (s *Scrubber) Add(secrets ...string) {
	var learn []string
	for _, x := range secrets {
		if len(strings.TrimSpace(x)) >= max(s.Min, 1) {
			learn = append(learn, forms(x)...)
		}
	}
	s.learn(learn)
}

// learn adds forms as they are, and makes the replacer again if one is
// new.
func (s *Scrubber) learn(forms []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, f := range forms {
		if f == "" || s.seen[f] {
			continue
		}
		if s.seen == nil {
			s.seen = map[string]bool{}
		}
		s.seen[f] = true
		s.longest = max(s.longest, len(f))
		if strings.Contains(f, "\n") {
			s.multiline = append(s.multiline, f)
		}
		changed = true
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
	s.list = list
}

// Longest is the length of the longest text the scrubber replaces: a
// stream cut less than this before the cut may hold the start of a
// secret.
func (s *Scrubber) Longest() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.longest
}

// AddMarked learns every string (and number) inside the parts of v marked
// phases.SensitiveMark. A string that also carries the phases.SecretParts
// mark made for it is learned whole and by its parts (AddDocument).
func (s *Scrubber) AddMarked(v cty.Value) {
	for _, x := range markedValues(v) {
		plain, pvm := x.UnmarkDeepWithPaths()
		_ = cty.Walk(plain, func(p cty.Path, y cty.Value) (bool, error) {
			if text, parts, ok := document(y, marksAt(pvm, p)); ok {
				s.AddDocument(text, parts)
				return false, nil
			}
			if !y.Type().IsPrimitiveType() {
				return true, nil
			}
			s.Add(leaves(y)...)
			return false, nil
		})
	}
}

// AddDocument learns a secret document whose secrets are parts: the
// document whole, in all its forms, and each part in all its forms and
// words, but not the document's own words. A Talos machine config is
// secret for its keys, not for the node's name in it.
func (s *Scrubber) AddDocument(text string, parts []string) {
	if len(strings.TrimSpace(text)) >= max(s.Min, 1) {
		s.learn(wholeForms(text))
	}
	s.Add(parts...)
}

// document is the text of y, a string, and its parts, when marks hold a
// phases.SecretParts made for that very text.
func document(y cty.Value, marks cty.ValueMarks) (string, []string, bool) {
	if y.Type() != cty.String || !y.IsKnown() || y.IsNull() {
		return "", nil, false
	}
	text := y.AsString()
	for m := range marks {
		if sp, ok := m.(phases.SecretParts); ok && sp.Describes(text) {
			return text, sp.Parts(), true
		}
	}
	return "", nil, false
}

// marksAt are the marks at path p among pvm.
func marksAt(pvm []cty.PathValueMarks, p cty.Path) cty.ValueMarks {
	for _, m := range pvm {
		if m.Path.Equals(p) {
			return m.Marks
		}
	}
	return nil
}

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
	var found []string
	for _, x := range markedValues(v) {
		found = append(found, leaves(x)...)
	}
	return found
}

// markedValues are the outermost values inside v marked
// phases.SensitiveMark, with their marks.
func markedValues(v cty.Value) []cty.Value {
	if v == cty.NilVal {
		return nil
	}
	var found []cty.Value
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return true, nil
		}
		found = append(found, x)
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

// Merge learns every secret o knows.
func (s *Scrubber) Merge(o *Scrubber) {
	o.mu.RLock()
	list := o.list
	o.mu.RUnlock()
	s.learn(list) // already in all their forms
}
