package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// settings is the evaluated provider block. The kubeconfig is only a path
// here: it is read at first use, since an earlier step of the same run
// (talos_kubeconfig) may write it.
type settings struct {
	name        string
	dir         string
	kubeconfig  string // absolute, or "" for the clientcmd loading rules
	contextName string
	defaultPSS  string // the cluster-wide enforce level
}

func configure(req providers.ConfigureRequest) (*settings, phases.Diagnostics) {
	s := &settings{name: req.Name, dir: req.Dir}
	if s.dir != "" {
		if abs, err := filepath.Abs(s.dir); err == nil {
			s.dir = abs
		}
	}
	c := newCall(s, phases.Address{Type: "provider", Name: req.Name}, req.Config, nil)
	c.what = fmt.Sprintf("provider helm %q", req.Name)
	kc, _ := c.str("kubeconfig", "")
	s.kubeconfig = s.abs(kc)
	s.contextName, _ = c.str("context", "")
	s.defaultPSS, _ = c.str("default_pod_security", levelBaseline)
	if !validLevel(s.defaultPSS) {
		c.errorf("Invalid PodSecurity Level", "default_pod_security of %s must be \"privileged\", \"baseline\" or \"restricted\", not %q.", c.what, s.defaultPSS)
	}
	return s, c.scrub.diags(c.diags)
}

// abs resolves a path against the runbook directory.
func (s *settings) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.dir, p)
}

// call is one provider call: the step's configuration (unmarked: every
// sensitive string went into scrub), the log, and the problems found.
type call struct {
	s     *settings
	addr  phases.Address
	what  string
	cfg   cty.Value
	scrub *scrubber
	log   *logWriter
	diags phases.Diagnostics
}

func newCall(s *settings, addr phases.Address, cfg cty.Value, log io.Writer) *call {
	c := &call{s: s, addr: addr, what: addr.String(), scrub: &scrubber{}}
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	c.scrub.addMarked(cfg)
	c.cfg, _ = cfg.UnmarkDeep()
	c.log = newLogWriter(log, c.scrub)
	return c
}

func (c *call) errorf(summary, format string, args ...any) {
	c.diags = append(c.diags, phases.Errorf(summary, format, args...)...)
}

func (c *call) get(name string) cty.Value { return getAttr(c.cfg, name) }

func getAttr(o cty.Value, name string) cty.Value {
	if !o.IsKnown() {
		return cty.DynamicVal
	}
	if o.IsNull() {
		return cty.NullVal(cty.DynamicPseudoType)
	}
	ty := o.Type()
	switch {
	case ty.IsObjectType():
		if !ty.HasAttribute(name) {
			return cty.NullVal(cty.DynamicPseudoType)
		}
		return o.GetAttr(name)
	case ty.IsMapType():
		k := cty.StringVal(name)
		if !o.HasIndex(k).True() {
			return cty.NullVal(cty.DynamicPseudoType)
		}
		return o.Index(k)
	}
	return cty.NullVal(cty.DynamicPseudoType)
}

// str returns a string attribute (def when null) and whether it is known.
func (c *call) str(name, def string) (string, bool) { return c.strOf(c.get(name), name, def) }

func (c *call) strOf(v cty.Value, name, def string) (string, bool) {
	if !v.IsKnown() {
		return def, false
	}
	if v.IsNull() {
		return def, true
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), true
	case cty.Number:
		return v.AsBigFloat().Text('f', -1), true
	case cty.Bool:
		return fmt.Sprint(v.True()), true
	}
	c.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a string, not %s.", name, c.what, v.Type().FriendlyName())
	return def, true
}

// boolean returns a bool attribute (false when null) and whether it is known.
func (c *call) boolean(name string) (bool, bool) {
	v := c.get(name)
	if !v.IsKnown() {
		return false, false
	}
	if v.IsNull() {
		return false, true
	}
	if v.Type() != cty.Bool {
		c.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a bool, not %s.", name, c.what, v.Type().FriendlyName())
		return false, true
	}
	return v.True(), true
}

// strs returns a list(string) attribute and whether it is wholly known.
func (c *call) strs(name string) ([]string, bool) {
	v := c.get(name)
	if !v.IsKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsListType() || ty.IsTupleType() || ty.IsSetType()) {
		c.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a list of strings, not %s.", name, c.what, ty.FriendlyName())
		return nil, true
	}
	var out []string
	known := true
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.IsKnown() {
			known = false
			continue
		}
		s, _ := c.strOf(e, name, "")
		out = append(out, s)
	}
	return out, known
}

// strMap returns a map(string) attribute and whether it is wholly known.
func (c *call) strMap(name string) (map[string]string, bool) {
	v := c.get(name)
	if !v.IsKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsMapType() || ty.IsObjectType()) {
		c.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a map of strings, not %s.", name, c.what, ty.FriendlyName())
		return nil, true
	}
	out := map[string]string{}
	known := true
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if !e.IsKnown() {
			known = false
			continue
		}
		s, _ := c.strOf(e, name, "")
		out[k.AsString()] = s
	}
	return out, known
}

// object returns an HCL object attribute as Helm values (JSON types, as
// Helm's own YAML values have) and whether it is wholly known.
func (c *call) object(name string) (map[string]any, bool) {
	v := c.get(name)
	if !v.IsWhollyKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsObjectType() || ty.IsMapType()) {
		c.errorf("Incorrect Attribute Type", "The %q attribute of %s must be an object, not %s.", name, c.what, ty.FriendlyName())
		return nil, true
	}
	b, err := ctyjson.Marshal(v, ty)
	if err != nil {
		c.errorf("Invalid Values", "The %q attribute of %s cannot be turned into Helm values: %v.", name, c.what, err)
		return nil, true
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		c.errorf("Invalid Values", "The %q attribute of %s cannot be turned into Helm values: %v.", name, c.what, err)
	}
	return out, true
}

// minSecret is the shortest string worth scrubbing: shorter ones appear in
// text by chance.
const minSecret = 4

// scrubber replaces secrets in text: every sensitive value of the call.
type scrubber struct {
	mu   sync.Mutex
	list []string
	rep  *strings.Replacer
}

func (s *scrubber) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, x := range secrets {
		if len(strings.TrimSpace(x)) < minSecret {
			continue
		}
		dup := false
		for _, y := range s.list {
			if y == x {
				dup = true
				break
			}
		}
		if !dup {
			s.list = append(s.list, x)
			changed = true
		}
	}
	if changed {
		sort.Slice(s.list, func(i, j int) bool { return len(s.list[i]) > len(s.list[j]) })
		pairs := make([]string, 0, 2*len(s.list))
		for _, x := range s.list {
			pairs = append(pairs, x, phases.Redacted)
		}
		s.rep = strings.NewReplacer(pairs...)
	}
}

// addMarked adds every string inside a value marked sensitive.
func (s *scrubber) addMarked(v cty.Value) {
	var found []string
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return true, nil
		}
		plain, _ := x.UnmarkDeep()
		_ = cty.Walk(plain, func(_ cty.Path, y cty.Value) (bool, error) {
			if y.IsKnown() && !y.IsNull() {
				switch y.Type() {
				case cty.String:
					found = append(found, y.AsString())
				case cty.Number:
					found = append(found, y.AsBigFloat().Text('f', -1))
				}
			}
			return true, nil
		})
		return true, nil
	})
	s.add(found...)
}

func (s *scrubber) text(t string) string {
	if t == "" {
		return t
	}
	s.mu.Lock()
	rep := s.rep
	s.mu.Unlock()
	if rep == nil {
		return t
	}
	return rep.Replace(t)
}

func (s *scrubber) diags(d phases.Diagnostics) phases.Diagnostics {
	for i := range d {
		d[i].Summary = s.text(d[i].Summary)
		d[i].Detail = s.text(d[i].Detail)
	}
	return d
}

// logWriter is the step's log with secrets scrubbed, line by line.
type logWriter struct {
	mu    sync.Mutex
	w     io.Writer
	buf   []byte
	scrub *scrubber
}

func newLogWriter(w io.Writer, s *scrubber) *logWriter {
	if w == nil {
		w = io.Discard
	}
	return &logWriter{w: w, scrub: s}
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i+1])
		l.buf = l.buf[i+1:]
		_, _ = io.WriteString(l.w, l.scrub.text(line))
	}
	return len(p), nil
}

// Printf writes one line.
func (l *logWriter) Printf(format string, args ...any) {
	fmt.Fprintf(l, format+"\n", args...)
}

// Flush writes what is left without a newline.
func (l *logWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		_, _ = io.WriteString(l.w, l.scrub.text(string(l.buf)))
		l.buf = nil
	}
}
