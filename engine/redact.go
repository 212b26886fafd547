package engine

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// redactor replaces secrets in free text: sensitive variables' values, and
// the sensitive outputs steps return during a run. Providers redact the
// values they are handed, but only the engine sees every secret, and a
// secret interpolated into a longer string ("echo ${var.token}") can only be
// caught by its own value.
type redactor struct {
	mu       sync.RWMutex
	secrets  map[string]bool
	replacer *strings.Replacer
	on       atomic.Bool
}

func newRedactor(secrets []string) *redactor {
	r := &redactor{secrets: map[string]bool{}}
	r.add(secrets...)
	return r
}

func (r *redactor) active() bool { return r != nil && r.on.Load() }

func (r *redactor) add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, s := range secrets {
		if s != "" && !r.secrets[s] {
			r.secrets[s] = true
			changed = true
		}
	}
	if !changed {
		return
	}
	list := make([]string, 0, len(r.secrets))
	for s := range r.secrets {
		list = append(list, s)
	}
	// Longest first, so a secret containing another is replaced whole.
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	pairs := make([]string, 0, 2*len(list))
	for _, s := range list {
		pairs = append(pairs, s, phases.Redacted)
	}
	r.replacer = strings.NewReplacer(pairs...)
	r.on.Store(true)
}

// addMarked learns every sensitive string inside v.
func (r *redactor) addMarked(v cty.Value) {
	if v == cty.NilVal {
		return
	}
	var found []string
	cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return true, nil
		}
		plain, _ := x.UnmarkDeep()
		if plain.Type() == cty.String && plain.IsKnown() && !plain.IsNull() {
			found = append(found, plain.AsString())
		}
		return true, nil
	})
	if len(found) > 0 {
		r.add(found...)
	}
}

func (r *redactor) redact(s string) string {
	if s == "" || !r.active() {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.replacer.Replace(s)
}
