package providertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// CanaryCase is a step whose configuration carries secrets: values
// marked phases.SensitiveMark (as a sensitive variable gives them), or in
// attributes the schema declares sensitive.
type CanaryCase struct {
	Type   string
	Config cty.Value
	// Secrets are the planted strings that must leave by no field.
	Secrets []string
}

// Canary runs each case through Read, Plan, Apply, Read again and
// Revert, and fails t when a secret appears in any field of any response
// (walked by reflection: strings, bytes and JSON, diagnostics, cty
// values outside their sensitive parts) or in the log. Each case also
// runs with every string of its configuration marked sensitive.
func Canary(t testing.TB, h Harness, cases []CanaryCase) {
	t.Helper()
	for _, c := range cases {
		canaryRun(t, h, c)
		plain, _ := c.Config.UnmarkDeep()
		cfg, all := markAll(plain)
		canaryRun(t, h, CanaryCase{Type: c.Type, Config: cfg, Secrets: append(all, c.Secrets...)})
	}
}

func canaryRun(t testing.TB, h Harness, c CanaryCase) {
	t.Helper()
	p := h.New()
	if cl, ok := p.(providers.Closer); ok {
		defer cl.Close()
	}
	cfg := h.ProviderConfig
	if cfg == cty.NilVal {
		cfg = cty.NullVal(cty.DynamicPseudoType)
	}
	ctx := context.Background()
	if r := p.Configure(ctx, providers.ConfigureRequest{Name: "canary", Config: cfg, Dir: h.Dir}); r.Diagnostics.HasErrors() {
		t.Fatalf("Configure: %v", r.Diagnostics.Err())
	}
	a := phases.Address{Type: c.Type, Name: "canary"}
	check := func(what string, v any) {
		t.Helper()
		for _, leak := range Leaks(v, c.Secrets) {
			t.Errorf("%s %s: %s", c.Type, what, leak)
		}
	}
	check("Read", p.Read(ctx, providers.ReadRequest{Type: c.Type, Addr: a, Config: c.Config}))
	plan := p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: c.Config, Action: providers.Create})
	check("Plan", plan)
	var log bytes.Buffer
	applied := p.Apply(ctx, providers.ApplyRequest{Type: c.Type, Addr: a, Config: c.Config, Planned: plan.Private,
		Approval: providers.Approval{By: "canary@localhost"}, Log: &log})
	check("Apply", applied)
	check("the Apply log", log.String())
	prior := &providers.Prior{Outputs: applied.Outputs, Private: applied.Private, Revert: applied.Revert}
	check("Read after Apply", p.Read(ctx, providers.ReadRequest{Type: c.Type, Addr: a, Config: c.Config, Prior: prior}))
	check("Plan after Apply", p.Plan(ctx, providers.PlanRequest{Type: c.Type, Addr: a, Config: c.Config, Prior: prior, Action: providers.Update}))
	if rv, ok := p.(providers.Reverter); ok && applied.Revert != nil {
		log.Reset()
		check("Revert", rv.Revert(ctx, providers.RevertRequest{Type: c.Type, Addr: a, Config: c.Config, Revert: *applied.Revert, Outputs: applied.Outputs, Log: &log}))
		check("the Revert log", log.String())
	}
	if d, ok := p.(providers.InputDigester); ok {
		check("InputDigest", d.InputDigest(ctx, providers.DigestRequest{Type: c.Type, Addr: a, Config: c.Config}))
	}
}

// Leaks walks v and says where a secret appears, in clear or in any
// form Encodings gives. Parts of cty values marked sensitive are
// skipped: the state and the terminal redact them.
func Leaks(v any, secrets []string) []string {
	var out []string
	look := func(where, text string) {
		for _, s := range secrets {
			if form, ok := Shows(text, s); ok {
				out = append(out, fmt.Sprintf("%s shows the secret %q (as %q)", where, s, form))
			}
		}
	}
	walk(reflect.ValueOf(v), "", look)
	return out
}

// Shows reports whether text holds secret in one of the forms Encodings
// gives, and which.
func Shows(text, secret string) (form string, ok bool) {
	if secret == "" {
		return "", false
	}
	for _, f := range Encodings(secret) {
		if strings.Contains(text, f) {
			return f, true
		}
	}
	return "", false
}

// Encodings are the forms a secret takes on its way out of a program:
// as it is; shell-quoted (each quote closed, escaped and opened again,
// or escaped inside double quotes); inside YAML's single quotes; escaped
// inside JSON (with and without Go's \u0026 for &, < and >) or a Go %q
// (also ASCII-only); in base64 (standard and URL alphabets, padded or not);
// URL-encoded (query and path); and each of these inside a JSON string.
func Encodings(secret string) []string {
	var forms []string
	add := func(f string) {
		if f != "" && !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	add(secret)
	add(strings.ReplaceAll(secret, "'", `'\''`))
	add(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(secret))
	add(strings.ReplaceAll(secret, "'", "''")) // YAML's single quotes
	add(quotedJSON(secret))
	add(jsonNoHTML(secret))
	for _, q := range []string{strconv.Quote(secret), strconv.QuoteToASCII(secret)} {
		add(q[1 : len(q)-1])
	}
	for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		add(e.EncodeToString([]byte(secret)))
	}
	add(url.QueryEscape(secret))
	add(url.PathEscape(secret))
	// Each form again inside a JSON string (a shell-quoted argv in a
	// saved plan's diff, a URL in a --json event).
	for _, f := range slices.Clone(forms) {
		add(quotedJSON(f))
		add(jsonNoHTML(f))
	}
	return forms
}

// jsonNoHTML is s escaped inside a JSON string as an encoder that leaves
// &, < and > alone writes it.
func jsonNoHTML(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(strings.TrimSpace(b.String()), `"`)[1:]
}

// Canaries are secrets shaped to slip past a scrubber that knows only a
// value's plain form: each carries a character that a shell quote, a
// JSON or %q string, a URL or a line-wise reader changes, and one is too
// short to be looked for in pieces. Provider canary tests plant each
// where a value goes (not a name that must be a DNS label).
var Canaries = []struct{ Name, Value string }{
	{"single quote", "P@ss'w0rd-c1"},
	{"double quote", `say"cheese"-c2`},
	{"backslash", `dom\user-c3`},
	{"html", "a&b<c>d-c4"},
	{"spaces", "correct horse c5"},
	{"newline", "line one\nline two-c6"},
	{"unicode", "pässwörd-ключ-c7"},
	{"short", "Zq#7v"},
}

func quotedJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

var ctyValue = reflect.TypeOf(cty.Value{})

func walk(v reflect.Value, where string, look func(where, text string)) {
	if !v.IsValid() {
		return
	}
	if v.Type() == ctyValue {
		if v.CanInterface() {
			walkCty(v.Interface().(cty.Value), where, look)
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		look(where, v.String())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			look(where, string(v.Bytes()))
			return
		}
		for i := range v.Len() {
			walk(v.Index(i), fmt.Sprintf("%s[%d]", where, i), look)
		}
	case reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i), fmt.Sprintf("%s[%d]", where, i), look)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			walk(it.Key(), where+" key", look)
			walk(it.Value(), fmt.Sprintf("%s[%v]", where, it.Key()), look)
		}
	case reflect.Pointer, reflect.Interface:
		walk(v.Elem(), where, look)
	case reflect.Struct:
		for i := range v.NumField() {
			walk(v.Field(i), where+"."+v.Type().Field(i).Name, look)
		}
	}
}

func walkCty(v cty.Value, where string, look func(where, text string)) {
	if v == cty.NilVal {
		return
	}
	plain, pvm := v.UnmarkDeepWithPaths()
	hidden := func(p cty.Path) bool {
		for _, m := range pvm {
			if _, ok := m.Marks[phases.SensitiveMark]; ok && len(m.Path) <= len(p) && m.Path.Equals(p[:len(m.Path)]) {
				return true
			}
		}
		return false
	}
	_ = cty.Walk(plain, func(p cty.Path, x cty.Value) (bool, error) {
		if hidden(p) {
			return false, nil
		}
		if x.IsKnown() && !x.IsNull() && x.Type() == cty.String {
			look(where+pathText(p), x.AsString())
		}
		return true, nil
	})
}

func pathText(p cty.Path) string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case cty.GetAttrStep:
			b.WriteString("." + s.Name)
		case cty.IndexStep:
			b.WriteString(fmt.Sprintf("[%#v]", s.Key))
		}
	}
	return b.String()
}
