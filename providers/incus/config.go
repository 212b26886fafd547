package incus

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/attrs"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/secret"
)

// settings is the evaluated provider block.
type settings struct {
	opts incusapi.Options
	// where names the daemon in messages: a socket, a URL or a remote.
	where string
	// clientCert is the client certificate's path, for advice on trusting it.
	clientCert string
}

// configure turns the provider block into client options. Nothing is
// contacted yet: an unreachable daemon is reported by the first step.
func configure(req providers.ConfigureRequest) (*settings, phases.Diagnostics) {
	d := newDecoder(phases.Address{Type: "provider", Name: req.Name}, req.Config)
	d.what = fmt.Sprintf("provider incus %q", req.Name)
	dir := req.Dir
	if dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		if strings.HasPrefix(p, "~/") {
			if home, err := os.UserHomeDir(); err == nil {
				return filepath.Join(home, p[2:])
			}
		}
		return filepath.Join(dir, p)
	}
	remote, _ := d.str("remote", "")
	configDir, _ := d.str("config_dir", "")
	address, _ := d.str("address", "")
	socket, _ := d.str("socket", "")
	clientCert, _ := d.str("client_cert", "")
	clientKey, _ := d.str("client_key", "")
	serverCert, _ := d.str("server_cert", "")
	project, _ := d.str("project", "")
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	s := &settings{}
	if configDir == "" {
		configDir = defaultConfigDir()
	} else {
		configDir = abs(configDir)
	}
	read := func(attr, p string) []byte {
		if p == "" {
			return nil
		}
		b, err := os.ReadFile(abs(p))
		if err != nil {
			d.errorf("Cannot Read "+attrTitle(attr), "The %s of %s cannot be read: %v.", attr, d.what, err)
		}
		return b
	}
	count := 0
	for _, x := range []string{remote, address, socket} {
		if x != "" {
			count++
		}
	}
	if count > 1 {
		d.errorf("Conflicting Attributes", "Set one of remote, address and socket in %s: remote names a remote of the incus CLI's config, address an HTTPS URL, socket the local unix socket.", d.what)
		return nil, d.diags
	}
	switch {
	case address != "":
		s.opts.URL = address
		s.where = address
		if clientCert == "" && clientKey == "" {
			// The incus CLI's own client certificate, as `incus remote add` uses.
			if _, err := os.Stat(filepath.Join(configDir, "client.crt")); err == nil {
				clientCert, clientKey = filepath.Join(configDir, "client.crt"), filepath.Join(configDir, "client.key")
			}
		}
		if (clientCert == "") != (clientKey == "") {
			d.errorf("Incomplete Client Certificate", "Set both client_cert and client_key in %s, or neither.", d.what)
		}
		s.opts.ClientCert = read("client_cert", clientCert)
		s.opts.ClientKey = read("client_key", clientKey)
		s.opts.ServerCert = read("server_cert", serverCert)
		s.clientCert = abs(clientCert)
	case socket != "":
		s.opts.Socket = abs(socket)
		s.where = "unix://" + s.opts.Socket
	case remote != "" && remote != "local":
		o, err := incusapi.RemoteOptions(configDir, remote)
		if err != nil {
			d.errorf("Unknown Incus Remote", "The remote %q of %s cannot be used with the incus CLI's configuration in %s: %v. List the remotes with `incus remote list`, or set address, client_cert, client_key and server_cert instead.", remote, d.what, configDir, err)
			break
		}
		s.opts = o
		s.where = fmt.Sprintf("remote %q (%s)", remote, firstNonEmpty(o.URL, "unix://"+o.Socket))
		s.clientCert = filepath.Join(configDir, "client.crt")
		if clientCert != "" || clientKey != "" || serverCert != "" {
			d.errorf("Conflicting Attributes", "%s names the remote %q, whose certificates come from %s; client_cert, client_key and server_cert go with address instead.", d.what, remote, configDir)
		}
	default:
		s.where = "the local unix socket"
		if sock := os.Getenv("INCUS_SOCKET"); sock != "" {
			s.where = "unix://" + sock
		}
	}
	if project != "" {
		s.opts.Project = project
	}
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return s, nil
}

func attrTitle(a string) string {
	parts := strings.Split(a, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, " ")
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" && x != "unix://" {
			return x
		}
	}
	return ""
}

// defaultConfigDir is the incus CLI's configuration directory.
func defaultConfigDir() string {
	if d, err := incusapi.DefaultConfigDir(); err == nil {
		return d
	}
	return filepath.Join(os.Getenv("HOME"), ".config", "incus")
}

// decoder reads attributes out of an evaluated block. It works on the
// unmarked value and remembers which paths were marked sensitive; every
// sensitive string goes to its scrubber.
type decoder struct {
	addr  phases.Address
	what  string
	obj   cty.Value
	sens  []cty.Path
	whole bool // the whole block is sensitive
	scrub *scrubber
	diags phases.Diagnostics
}

func newDecoder(addr phases.Address, cfg cty.Value) *decoder {
	d := &decoder{addr: addr, what: addr.String(), scrub: &scrubber{Min: minSecret}}
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	v, pvm := cfg.UnmarkDeepWithPaths()
	for _, pm := range pvm {
		if _, ok := pm.Marks[phases.SensitiveMark]; !ok {
			continue
		}
		if len(pm.Path) == 0 {
			d.whole = true
		}
		d.sens = append(d.sens, pm.Path)
		if mv, err := pm.Path.Apply(v); err == nil {
			d.scrub.AddValue(mv)
		}
	}
	d.obj = v
	return d
}

func (d *decoder) errorf(summary, format string, args ...any) {
	d.diags = append(d.diags, phases.Errorf(summary, format, args...)...)
}

// sensitive reports whether the value at path, or anything inside it or
// around it, is marked sensitive.
func (d *decoder) sensitive(path ...string) bool {
	if d.whole {
		return true
	}
	for _, p := range d.sens {
		n := min(len(p), len(path))
		match := true
		for i := 0; i < n; i++ {
			if stepName(p[i]) != path[i] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func stepName(s cty.PathStep) string {
	switch x := s.(type) {
	case cty.GetAttrStep:
		return x.Name
	case cty.IndexStep:
		if x.Key.Type() == cty.String && x.Key.IsKnown() && !x.Key.IsNull() {
			return x.Key.AsString()
		}
		if x.Key.Type() == cty.Number && x.Key.IsKnown() && !x.Key.IsNull() {
			return x.Key.AsBigFloat().String()
		}
	}
	return "\x00"
}

// known reports whether the configuration as a whole is known.
func (d *decoder) known() bool { return d.obj.IsKnown() && !d.obj.IsNull() }

// get returns an attribute: null when absent, unknown when the block is.
func (d *decoder) get(name string) cty.Value {
	return attrs.Get(d.obj, name)
}

// set reports whether the attribute is given (known or not).
func (d *decoder) set(name string) bool {
	v := d.get(name)
	return !v.IsKnown() || !v.IsNull()
}

// str returns a string attribute (def when null) and whether it is known.
func (d *decoder) str(name, def string) (string, bool) {
	return d.strOf(d.get(name), name, def)
}

func (d *decoder) strOf(v cty.Value, name, def string) (string, bool) {
	return attrs.Str(&d.diags, d.what, v, name, def)
}

// boolean returns a bool attribute (def when null) and whether it is known.
func (d *decoder) boolean(name string, def bool) (bool, bool) {
	v := d.get(name)
	if !v.IsKnown() {
		return def, false
	}
	if v.IsNull() {
		return def, true
	}
	switch v.Type() {
	case cty.Bool:
		return v.True(), true
	case cty.String:
		switch v.AsString() {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be true or false.", name, d.what)
	return def, true
}

// number returns a whole-number attribute as text ("" when null) and
// whether it is known.
func (d *decoder) number(name string) (string, bool) {
	v := d.get(name)
	if !v.IsKnown() {
		return "", false
	}
	if v.IsNull() {
		return "", true
	}
	var f *big.Float
	switch v.Type() {
	case cty.Number:
		f = v.AsBigFloat()
	case cty.String:
		var ok bool
		f, ok = new(big.Float).SetString(v.AsString())
		if !ok {
			d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a number.", name, d.what)
			return "", true
		}
	default:
		d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a number, not %s.", name, d.what, v.Type().FriendlyName())
		return "", true
	}
	if !f.IsInt() || f.Sign() <= 0 {
		d.errorf("Invalid Attribute Value", "The %q attribute of %s must be a whole number above zero.", name, d.what)
		return "", true
	}
	return f.Text('f', 0), true
}

// strs returns a list(string) attribute, whether it is given, and whether
// it is wholly known.
func (d *decoder) strs(name string) ([]string, bool, bool) {
	v := d.get(name)
	if !v.IsKnown() {
		return nil, true, false
	}
	if v.IsNull() {
		return nil, false, true
	}
	ty := v.Type()
	if !(ty.IsListType() || ty.IsTupleType() || ty.IsSetType()) {
		d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a list of strings, not %s.", name, d.what, ty.FriendlyName())
		return nil, true, true
	}
	out := []string{}
	known := true
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if !e.IsKnown() {
			known = false
			continue
		}
		s, _ := d.strOf(e, name, "")
		out = append(out, s)
	}
	return out, true, known
}

// strMapOf returns a map(string) value and whether it is wholly known.
func (d *decoder) strMapOf(v cty.Value, name string) (map[string]string, bool) {
	return attrs.StrMap(&d.diags, d.what, v, name)
}

// strMap returns a map(string) attribute and whether it is wholly known.
func (d *decoder) strMap(name string) (map[string]string, bool) {
	return d.strMapOf(d.get(name), name)
}

// devMap returns a map(map(string)) attribute and whether it is wholly known.
func (d *decoder) devMap(name string) (map[string]map[string]string, bool) {
	v := d.get(name)
	if !v.IsKnown() {
		return nil, false
	}
	if v.IsNull() {
		return nil, true
	}
	ty := v.Type()
	if !(ty.IsMapType() || ty.IsObjectType()) {
		d.errorf("Incorrect Attribute Type", "The %q attribute of %s must be a map of devices, each a map of strings.", name, d.what)
		return nil, true
	}
	out := map[string]map[string]string{}
	known := true
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		m, ok := d.strMapOf(e, name)
		if !ok {
			known = false
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		out[k.AsString()] = m
	}
	return out, known
}

// scrubber replaces sensitive strings in text.
type scrubber = secret.Scrubber

// minSecret is the shortest string worth scrubbing from free text; shorter
// sensitive values are kept out of text by the renderers themselves.
const minSecret = 4
