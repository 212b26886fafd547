package runbooks

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/homelab-migrate/migrate/phases"
)

// backendBlock is backend "TYPE" { ... }: where the state lives.
// Terraform's backend block is the model: at most one, the local files by
// default, values known before anything runs (variables, not step outputs).
type backendBlock struct {
	Type      string    `hcl:"type,label"`
	TypeRange hcl.Range `hcl:"type,label_range"`
	Config    hcl.Body  `hcl:",remain"`
	DefRange  hcl.Range `hcl:",def_range"`
}

// BackendTypes are the backend types a backend block may name.
var BackendTypes = []string{"etcd", "local"}

// MinLockTTL is the shortest lease etcd grants as asked: it lengthens
// shorter ones to its election timeout.
const MinLockTTL = 2 * time.Second

var etcdBackendSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "endpoints", Required: true},
	{Name: "prefix", Required: true},
	{Name: "ca"}, {Name: "cert"}, {Name: "key"},
	{Name: "username"}, {Name: "password"},
	{Name: "lock_ttl"}, {Name: "insecure"},
}}

// declareBackend decodes the backend block, if any.
func (ld *load) declareBackend(blocks []*backendBlock) *phases.BackendConfig {
	var cfg *phases.BackendConfig
	var first *backendBlock
	for _, b := range blocks {
		if first != nil {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate Backend Block",
				Detail:   fmt.Sprintf("A backend was already declared at %s. A runbook has at most one backend block: its state lives in one place.", first.DefRange),
				Subject:  b.DefRange.Ptr(),
			})
		}
		// Every block is checked, so one load reports every mistake; the
		// first is the one used.
		var c *phases.BackendConfig
		switch b.Type {
		case "local":
			// The default, stated: nothing to set (--state moves it).
			_, diags := b.Config.Content(&hcl.BodySchema{})
			ld.diags = append(ld.diags, diags...)
			c = &phases.BackendConfig{Type: "local", Range: toRange(b.DefRange)}
		case "etcd":
			c = ld.etcdBackend(b)
		default:
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unknown Backend Type",
				Detail: fmt.Sprintf("There is no backend of type %q.%s The backend types are %s; without a backend block the state is kept in local files.",
					b.Type, didYouMean(b.Type, BackendTypes), englishList(BackendTypes)),
				Subject: b.TypeRange.Ptr(),
			})
		}
		if first == nil {
			first, cfg = b, c
		}
	}
	return cfg
}

func (ld *load) etcdBackend(b *backendBlock) *phases.BackendConfig {
	content, diags := b.Config.Content(etcdBackendSchema)
	ld.diags = append(ld.diags, diags...)
	cfg := &phases.BackendConfig{Type: "etcd", Range: toRange(b.DefRange)}
	str := func(name string, sensitive bool) string {
		a, ok := content.Attributes[name]
		if !ok {
			return ""
		}
		v, ok := ld.backendValue(a, cty.String, sensitive, cfg)
		if !ok {
			return ""
		}
		return v.AsString()
	}
	if a, ok := content.Attributes["endpoints"]; ok {
		if v, ok := ld.backendValue(a, cty.List(cty.String), false, cfg); ok {
			ld.etcdEndpoints(a, v, cfg)
		}
	}
	cfg.Prefix = str("prefix", false)
	cfg.CA, cfg.Cert, cfg.Key = ld.path(str("ca", false)), ld.path(str("cert", false)), ld.path(str("key", false))
	cfg.Username = str("username", false)
	cfg.Password = str("password", true)
	if cfg.Password != "" {
		ld.secrets = append(ld.secrets, cfg.Password)
	}
	if a, ok := content.Attributes["insecure"]; ok {
		if v, ok := ld.backendValue(a, cty.Bool, false, cfg); ok {
			cfg.Insecure = v.True()
		}
	}
	if a, ok := content.Attributes["lock_ttl"]; ok {
		if d, ok := ld.duration(a.Expr, "lock_ttl", false); ok {
			if d < MinLockTTL {
				ld.diags = append(ld.diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid Duration",
					Detail:   fmt.Sprintf("The lock_ttl must be at least %s: etcd grants no shorter lease. It is how long the lock outlives a holder that died.", MinLockTTL),
					Subject:  a.Expr.Range().Ptr(),
				})
			} else {
				cfg.LockTTL = d
			}
		}
	}
	ld.etcdPairs(content)
	sort.Strings(cfg.Unknown)
	return cfg
}

// etcdEndpoints sets the endpoints of the etcd backend from v, the value of
// the endpoints attribute a.
func (ld *load) etcdEndpoints(a *hcl.Attribute, v cty.Value, cfg *phases.BackendConfig) {
	for _, e := range v.AsValueSlice() {
		if e.IsNull() || e.AsString() == "" {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid Backend Endpoints",
				Detail:   "Every endpoint must be an address such as \"127.0.0.1:2379\" or \"https://etcd1:2379\"; one is empty.",
				Subject:  a.Expr.Range().Ptr(),
			})
			continue
		}
		cfg.Endpoints = append(cfg.Endpoints, e.AsString())
	}
	if v.LengthInt() == 0 {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid Backend Endpoints",
			Detail:   "The etcd backend needs at least one endpoint, such as endpoints = [\"127.0.0.1:2379\"].",
			Subject:  a.Expr.Range().Ptr(),
		})
	}
}

// etcdPairs checks the attributes of the etcd backend that go in pairs.
func (ld *load) etcdPairs(content *hcl.BodyContent) {
	// A client certificate is a pair.
	for _, pair := range [][2]string{{"cert", "key"}, {"key", "cert"}} {
		a, ok := content.Attributes[pair[0]]
		if _, other := content.Attributes[pair[1]]; ok && !other {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Incomplete Client Certificate",
				Detail:   fmt.Sprintf("The backend sets %s without %s: a client certificate needs both the certificate (cert) and its private key (key).", pair[0], pair[1]),
				Subject:  a.NameRange.Ptr(),
			})
		}
	}
	if _, ok := content.Attributes["password"]; ok {
		if _, user := content.Attributes["username"]; !user {
			ld.diags = append(ld.diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Password Without Username",
				Detail:   "The backend sets a password but no username: etcd authenticates a user with both.",
				Subject:  content.Attributes["password"].NameRange.Ptr(),
			})
		}
	}
}

// backendValue evaluates a backend attribute: variables, locals and
// functions, no step outputs (the state is opened before any step runs).
// Only the password may be sensitive; others are shown in messages. A value
// unknown (a variable without a value, for status) is noted in
// cfg.Unknown.
func (ld *load) backendValue(a *hcl.Attribute, ty cty.Type, sensitive bool, cfg *phases.BackendConfig) (cty.Value, bool) {
	_, bad, diags := ld.checkRefs(a.Expr.Variables(), false, fmt.Sprintf("The backend's %s", a.Name))
	ld.diags = append(ld.diags, diags...)
	if len(bad) > 0 {
		return cty.NilVal, false
	}
	ctx := ld.scope.evalContext(nil, nil, nil)
	v, diags := a.Expr.Value(ctx)
	ld.diags = append(ld.diags, hideSensitive(diags, ctx, a.Expr)...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if containsSensitive(v) && !sensitive {
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Sensitive Value in the Backend",
			Detail:   fmt.Sprintf("The backend's %s cannot be computed from a sensitive value: it is shown in messages. Only the password may be secret.", a.Name),
			Subject:  a.Expr.Range().Ptr(),
		})
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		cfg.Unknown = append(cfg.Unknown, a.Name)
		return cty.NilVal, false
	}
	if v.IsNull() {
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil {
		msg := err.Error()
		if sensitive {
			msg = "the value is not one" // the value is secret: never quoted
		}
		ld.diags = append(ld.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect Attribute Value Type",
			Detail:   fmt.Sprintf("Inappropriate value for the backend's %s: %s is required: %s.", a.Name, ty.FriendlyName(), msg),
			Subject:  a.Expr.Range().Ptr(),
		})
		return cty.NilVal, false
	}
	return cv, true
}

// path resolves a file path of the backend against the runbook directory.
func (ld *load) path(p string) string {
	if p == "" || filepath.IsAbs(p) || ld.opts.Dir == "" {
		return p
	}
	return filepath.Join(ld.opts.Dir, p)
}

// DeclaresBackend reports whether a runbook file in dir (not a variables
// file) has a top-level backend block, read by the parser alone: the
// state commands load and evaluate the whole runbook only then. A file
// that does not parse counts as one that may: loading it says what is
// wrong.
func DeclaresBackend(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.hcl"))
	for _, name := range files {
		if strings.HasSuffix(name, ".auto.hcl") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		f, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
		if diags.HasErrors() {
			return true
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			if b.Type == "backend" {
				return true
			}
		}
	}
	return false
}
