package helm

import (
	"fmt"
	"os"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// releaseStep is a decoded helm_release step.
type releaseStep struct {
	name, chart, version, namespace string
	values                          map[string]any
	valuesFiles                     []string
	sensitive                       map[string]string // dot path -> value
	createNamespace, atomic, wait   bool
	timeout                         time.Duration
}

// decodeRelease decodes the step; known is false when a value is not known
// yet (it depends on a step that has not run).
func (c *call) decodeRelease() (*releaseStep, bool) {
	if !c.cfg.IsKnown() {
		return nil, false
	}
	st := &releaseStep{}
	ok := true
	and := func(k bool) { ok = ok && k }
	var k bool
	st.name, k = c.str("name", c.addr.Name)
	and(k)
	st.chart, k = c.str("chart", "")
	and(k)
	if k && st.chart == "" {
		c.errorf("Missing Required Attribute", "The \"chart\" attribute of %s is required.", c.what)
	}
	st.version, k = c.str("version", "")
	and(k)
	st.namespace, k = c.str("namespace", "default")
	and(k)
	st.values, k = c.object("values")
	and(k)
	st.valuesFiles, k = c.strs("values_files")
	and(k)
	st.sensitive, k = c.strMap("set_sensitive")
	and(k)
	for _, v := range st.sensitive {
		c.scrub.Add(v)
	}
	st.createNamespace, k = c.boolean("create_namespace")
	and(k)
	st.atomic, k = c.boolean("atomic")
	and(k)
	st.wait, k = c.boolean("wait")
	and(k)
	timeout, k := c.str("timeout", "5m")
	and(k)
	if k {
		d, err := time.ParseDuration(timeout)
		if err != nil || d <= 0 {
			c.errorf("Invalid Timeout", "The timeout of %s must be a positive duration such as \"5m\", not %q.", c.what, timeout)
		}
		st.timeout = d
	}
	if st.name != "" {
		if err := chartutil.ValidateReleaseName(st.name); err != nil {
			c.errorf("Invalid Release Name", "%q is not a valid release name for %s: %v.", st.name, c.what, err)
		}
	}
	if st.namespace != "" {
		if errs := validation.IsDNS1123Label(st.namespace); len(errs) > 0 {
			c.errorf("Invalid Namespace Name", "%q is not a valid namespace for %s: %s.", st.namespace, c.what, strings.Join(errs, "; "))
		}
	}
	return st, ok
}

// isRemote says the chart is a repository URL or an OCI reference.
func isRemote(ref string) bool {
	return strings.HasPrefix(ref, "oci://") || strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://")
}

// loadChart loads the step's chart: a local directory or .tgz relative to
// the runbook, or (where reachable) a repository URL or OCI reference.
func (c *call) loadChart(st *releaseStep) (*chart.Chart, error) {
	path := st.chart
	if isRemote(path) {
		var opts action.ChartPathOptions
		opts.Version = st.version
		if !strings.HasPrefix(path, "oci://") && !strings.HasSuffix(path, ".tgz") {
			// https://charts.example.org/name: a repository and a chart.
			i := strings.LastIndex(path, "/")
			opts.RepoURL, path = path[:i], path[i+1:]
		}
		located, err := opts.LocateChart(path, cli.New())
		if err != nil {
			return nil, fmt.Errorf("fetching chart %s: %w", st.chart, err)
		}
		path = located
	} else {
		path = c.s.abs(path)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("chart %s: %w", st.chart, err)
		}
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", st.chart, err)
	}
	if st.version != "" && ch.Metadata != nil && ch.Metadata.Version != strings.TrimPrefix(st.version, "v") && ch.Metadata.Version != st.version {
		return nil, fmt.Errorf("chart %s is version %s, the step requires %s", st.chart, ch.Metadata.Version, st.version)
	}
	if err := checkDependencies(ch); err != nil {
		return nil, fmt.Errorf("chart %s: %w", st.chart, err)
	}
	return ch, nil
}

func checkDependencies(ch *chart.Chart) error {
	if ch.Metadata == nil || len(ch.Metadata.Dependencies) == 0 {
		return nil
	}
	return action.CheckDependencies(ch, ch.Metadata.Dependencies)
}

// mergedValues are the values files in order, then values, then
// set_sensitive.
func (c *call) mergedValues(st *releaseStep) (map[string]any, error) {
	out := map[string]any{}
	for _, f := range st.valuesFiles {
		b, err := os.ReadFile(c.s.abs(f))
		if err != nil {
			return nil, fmt.Errorf("reading values file: %w", err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
		}
		out = mergeMaps(out, m)
	}
	out = mergeMaps(out, st.values)
	for _, path := range sortedKeys(st.sensitive) {
		if err := setPath(out, path, st.sensitive[path]); err != nil {
			return nil, err
		}
	}
	return out, nil
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
