package helm

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// validateRelease checks the step and completes it with its defaults.
func validateRelease(c *call, a *relAttrs) phases.Diagnostics {
	if c.Null("name") {
		a.Name = c.Addr.Name
	}
	if c.Null("namespace") {
		a.Namespace = "default"
	}
	if c.Null("timeout") {
		a.Timeout = "5m"
	}
	if c.Null("wait") {
		a.Wait = true // as the helm CLI's --wait, by default: a phase is not done while its apps are down
	}
	var diags phases.Diagnostics
	bad := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	if !c.Unknown("chart") && a.Chart == "" {
		bad("Missing Required Attribute", "The \"chart\" attribute of %s is required.", c.Addr)
	}
	if !c.Unknown("timeout") {
		if d, err := time.ParseDuration(a.Timeout); err != nil || d <= 0 {
			bad("Invalid Timeout", "The timeout of %s must be a positive duration such as \"5m\", not %q.", c.Addr, a.Timeout)
		}
	}
	if !c.Unknown("name") && a.Name != "" {
		if err := chartutil.ValidateReleaseName(a.Name); err != nil {
			bad("Invalid Release Name", "%q is not a valid release name for %s: %v.", a.Name, c.Addr, err)
		}
	}
	if !c.Unknown("namespace") && a.Namespace != "" {
		if errs := validation.IsDNS1123Label(a.Namespace); len(errs) > 0 {
			bad("Invalid Namespace Name", "%q is not a valid namespace for %s: %s.", a.Namespace, c.Addr, strings.Join(errs, "; "))
		}
	}
	diags = append(diags, validateSource(c, *a)...)
	if v := a.Values; !c.Unknown("values") && v != cty.NilVal && !v.IsNull() && !v.Type().IsObjectType() && !v.Type().IsMapType() {
		bad("Incorrect Attribute Type", "The %q attribute of %s must be an object, not %s.", "values", c.Addr, v.Type().FriendlyName())
	}
	return diags
}

// digestForm is a chart digest as the registries and indexes say it.
var digestForm = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// validateSource checks the attributes that say where a remote chart
// comes from and how to reach it.
func validateSource(c *call, a relAttrs) phases.Diagnostics {
	var diags phases.Diagnostics
	bad := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	chartKnown := !c.Unknown("chart") && a.Chart != ""
	if !c.Unknown("digest") && a.Digest != "" {
		switch {
		case !digestForm.MatchString(a.Digest):
			bad("Invalid Chart Digest", "The digest of %s must be \"sha256:\" and 64 lower-case hexadecimal digits, as helm push prints it, not %q.", c.Addr, a.Digest)
		case chartKnown && !isRemote(a.Chart):
			bad("Digest Of A Local Chart", "%s pins digest %s, but its chart %s is a local one, which the plan's contract pins by its files: remove digest, or name the chart in its registry (oci://…).", c.Addr, a.Digest, a.Chart)
		}
	}
	if u, err := url.Parse(a.Chart); chartKnown && isRemote(a.Chart) && err == nil && u.User != nil {
		// Not quoted: the URL holds a secret.
		bad("Credentials In Chart URL", "The chart of %s names credentials in its URL, which plans, logs and the state would show: give them in username and password (sensitive), or in registry_config.", c.Addr)
	} else if chartKnown && strings.HasPrefix(a.Chart, "oci://") && strings.Contains(a.Chart, "@") {
		bad("Digest In Chart Reference", "The chart of %s, %s, names a digest: give the chart without it, its version in version and its digest in digest, so that the plan can say which of them moved.", c.Addr, a.Chart)
	}
	if !c.Unknown("username") && !c.Unknown("password") && (a.Username == "") != (a.Password == "") {
		bad("Incomplete Registry Credentials", "%s sets one of username and password: set both, or neither (the registry config then gives them).", c.Addr)
	}
	if !c.Unknown("plain_http") && a.PlainHTTP != nil && *a.PlainHTTP && a.CAFile != "" {
		bad("Plain HTTP With A CA File", "%s sets plain_http = true and ca_file: ca_file verifies a registry's TLS, which plain HTTP does not speak; remove one.", c.Addr)
	}
	return diags
}

// timeout is the step's timeout, valid once validated.
func timeout(a relAttrs) time.Duration {
	d, _ := time.ParseDuration(a.Timeout)
	return d
}

// helmValues turns an HCL object into Helm values (JSON types, as Helm's
// own YAML values have).
func helmValues(v cty.Value) (map[string]any, error) {
	out := map[string]any{}
	if v == cty.NilVal || v.IsNull() {
		return out, nil
	}
	b, err := ctyjson.Marshal(v, v.Type())
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		return nil, fmt.Errorf("the \"values\" attribute cannot be turned into Helm values: %w", err)
	}
	return out, nil
}

// isRemote says the chart is a repository URL or an OCI reference.
func isRemote(ref string) bool {
	return strings.HasPrefix(ref, "oci://") || strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://")
}

// mergedValues are the values files in order, then values, then
// set_sensitive. The values of age-encrypted files go to the scrubber,
// and their paths are returned, to scrub the deployed revision's too.
func (p *Provider) mergedValues(c *call, st relAttrs) (map[string]any, [][]string, error) {
	out := map[string]any{}
	var secretPaths [][]string
	for _, f := range st.ValuesFiles {
		m, encrypted, err := p.readValuesFile(f)
		if err != nil {
			return nil, nil, err
		}
		if encrypted {
			walkLeaves(m, nil, func(path []string, v string) {
				c.Scrub.Add(v)
				secretPaths = append(secretPaths, path)
			})
		}
		out = mergeMaps(out, m)
	}
	vals, err := helmValues(st.Values)
	if err != nil {
		return nil, nil, err
	}
	out = mergeMaps(out, vals)
	for _, path := range slices.Sorted(maps.Keys(st.SetSensitive)) {
		if err := setPath(out, path, st.SetSensitive[path]); err != nil {
			return nil, nil, err
		}
	}
	return out, secretPaths, nil
}

// yamlLine finds the line a YAML error names.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// readValuesFile reads a values file, decrypting it in memory when it is
// age-encrypted (with MIGRATE_AGE_IDENTITY, which the program keeps). The
// errors of an encrypted one name its line, never its content.
func (p *Provider) readValuesFile(f string) (map[string]any, bool, error) {
	b, err := os.ReadFile(p.abs(f))
	if err != nil {
		return nil, false, fmt.Errorf("reading values file: %w", err)
	}
	encrypted := agefile.IsEncrypted(b)
	if !encrypted && strings.HasSuffix(f, agefile.Ext) {
		return nil, false, fmt.Errorf("values file %s is named %s but is not age-encrypted: encrypt it (migrate secrets encrypt) or rename it", f, agefile.Ext)
	}
	if encrypted {
		ids, err := agefile.Identities("")
		if err != nil {
			return nil, true, fmt.Errorf("values file %s is age-encrypted: %w", f, err)
		}
		if b, err = agefile.Decrypt(b, ids...); err != nil {
			return nil, true, fmt.Errorf("decrypting values file %s: %w", f, err)
		}
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		if encrypted {
			at := ""
			if l := yamlLine.FindStringSubmatch(err.Error()); l != nil {
				at = ":" + l[1]
			}
			return nil, true, fmt.Errorf("values file %s%s is not valid YAML (the details are not shown, as the file is encrypted: migrate secrets edit %s)", f, at, f)
		}
		return nil, false, fmt.Errorf("values file %s: %w", f, err)
	}
	return m, encrypted, nil
}

// walkLeaves calls fn with the path and text of every string leaf of v.
func walkLeaves(v any, path []string, fn func([]string, string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walkLeaves(e, append(slices.Clone(path), k), fn)
		}
	case []any:
		for i, e := range x {
			walkLeaves(e, append(slices.Clone(path), fmt.Sprint(i)), fn)
		}
	case string:
		fn(path, x)
	}
}

// mergeMaps merges b over a, recursively, as helm merges values files.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bv, ok := v.(map[string]any); ok {
			if av, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(av, bv)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// setPath sets a string at a dot path ("db.password"; a backslash before a dot escapes it).
func setPath(m map[string]any, path, value string) error {
	keys := splitPath(path)
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("set_sensitive key %q has an empty segment", path)
		}
	}
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = value
	return nil
}

// splitPath splits a dot path; a backslash before a dot keeps it in the key.
func splitPath(path string) []string {
	var keys []string
	var cur strings.Builder
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '\\' && i+1 < len(path) && path[i+1] == '.':
			cur.WriteByte('.')
			i++
		case path[i] == '.':
			keys = append(keys, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(path[i])
		}
	}
	return append(keys, cur.String())
}
