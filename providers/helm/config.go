package helm

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/attrs"
	"github.com/homelab-migrate/migrate/secret"
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
	return s, c.scrub.Diags(c.diags)
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
	c := &call{s: s, addr: addr, what: addr.String(), scrub: &scrubber{Min: minSecret}}
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	c.scrub.AddMarked(cfg)
	c.cfg, _ = cfg.UnmarkDeep()
	c.log = newLogWriter(log, c.scrub)
	return c
}

func (c *call) errorf(summary, format string, args ...any) {
	c.diags = append(c.diags, phases.Errorf(summary, format, args...)...)
}

func (c *call) get(name string) cty.Value { return getAttr(c.cfg, name) }

func getAttr(o cty.Value, name string) cty.Value { return attrs.Get(o, name) }

// str returns a string attribute (def when null) and whether it is known.
func (c *call) str(name, def string) (string, bool) { return c.strOf(c.get(name), name, def) }

func (c *call) strOf(v cty.Value, name, def string) (string, bool) {
	return attrs.Str(&c.diags, c.what, v, name, def)
}

// boolean returns a bool attribute (false when null) and whether it is known.
func (c *call) boolean(name string) (bool, bool) {
	return attrs.Bool(&c.diags, c.what, c.get(name), name, false)
}

// strs returns a list(string) attribute and whether it is wholly known.
func (c *call) strs(name string) ([]string, bool) {
	return attrs.Strs(&c.diags, c.what, c.get(name), name)
}

// strMap returns a map(string) attribute and whether it is wholly known.
func (c *call) strMap(name string) (map[string]string, bool) {
	return attrs.StrMap(&c.diags, c.what, c.get(name), name)
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

// scrubber replaces secrets in text: every sensitive value of the call.
type scrubber = secret.Scrubber

// logWriter is the step's log with secrets scrubbed, line by line.
type logWriter = secret.Writer

func newLogWriter(w io.Writer, s *scrubber) *logWriter { return secret.NewWriter(w, s) }

// minSecret is the shortest string worth scrubbing: shorter ones appear in
// text by chance.
const minSecret = 4
