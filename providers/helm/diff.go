package helm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/homelab-migrate/migrate/phases"
)

// object is one document of a rendered manifest.
type object struct {
	Kind, APIVersion, Namespace, Name string
	Namespaced                        bool
	Text                              string // as shown: Secrets' values replaced
	Raw                               string // as rendered
}

// ID names the object as helm-diff does: "Kind namespace/name".
func (o *object) ID() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// parseManifest splits a rendered manifest into objects. Objects without
// a namespace get the release's when their kind is namespaced.
func (p *Provider) parseManifest(manifest, releaseNS string, mapper meta.RESTMapper) ([]*object, error) {
	docs := releaseutil.SplitManifests(manifest)
	out := make([]*object, 0, len(docs))
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		doc := strings.TrimSpace(docs[name])
		if doc == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", sourceOf(doc), err)
		}
		if len(m) == 0 {
			continue
		}
		o := &object{Raw: doc, Text: doc}
		o.Kind, _ = m["kind"].(string)
		o.APIVersion, _ = m["apiVersion"].(string)
		md, _ := m["metadata"].(map[string]any)
		o.Name, _ = md["name"].(string)
		o.Namespace, _ = md["namespace"].(string)
		o.Namespaced = namespaced(mapper, o.APIVersion, o.Kind)
		switch {
		case !o.Namespaced:
			o.Namespace = ""
		case o.Namespace == "":
			o.Namespace = releaseNS
		}
		if o.Kind == "Secret" && o.APIVersion == "v1" {
			o.Text = p.redactSecret(doc, m)
		}
		out = append(out, o)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out, nil
}

// clusterScoped are kinds known without asking the API server.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "CustomResourceDefinition": true,
	"PersistentVolume": true, "StorageClass": true, "PriorityClass": true, "IngressClass": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "APIService": true,
	"RuntimeClass": true, "CSIDriver": true, "Node": true,
}

func namespaced(mapper meta.RESTMapper, apiVersion, kind string) bool {
	if clusterScoped[kind] {
		return false
	}
	if mapper == nil {
		return true
	}
	gv, err := k8sschema.ParseGroupVersion(apiVersion)
	if err != nil {
		return true
	}
	m, err := mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
	if err != nil {
		return true
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace
}

func sourceOf(doc string) string {
	for _, l := range strings.Split(doc, "\n") {
		if s, ok := strings.CutPrefix(l, "# Source: "); ok {
			return s
		}
	}
	return "a manifest document"
}

// redactSecret replaces every value of a Secret by a keyed fingerprint:
// two plans of the same run show whether a value changed, never the value.
func (p *Provider) redactSecret(doc string, m map[string]any) string {
	p.fingerprint(m)
	b, err := yaml.Marshal(m)
	if err != nil {
		return "# Source: " + sourceOf(doc) + "\n" + phases.Redacted
	}
	return "# Source: " + sourceOf(doc) + "\n" + string(b)
}

// fingerprint replaces, in place, every value of a Secret's data and
// stringData by its keyed fingerprint.
func (p *Provider) fingerprint(m map[string]any) {
	for _, field := range []string{"data", "stringData"} {
		d, ok := m[field].(map[string]any)
		if !ok {
			continue
		}
		d = maps.Clone(d)
		for k, v := range d {
			mac := hmac.New(sha256.New, p.hmacKey)
			fmt.Fprint(mac, v)
			d[k] = fmt.Sprintf("%s #%s", phases.Redacted, hex.EncodeToString(mac.Sum(nil))[:8])
		}
		m[field] = d
	}
}

// manifestDiff is the per-object difference between the deployed and the
// rendered manifest.
type manifestDiff struct {
	added, changed, removed, same int
	text                          strings.Builder
}

func diffObjects(old, new []*object) *manifestDiff {
	d := &manifestDiff{}
	oldBy := map[string]*object{}
	for _, o := range old {
		oldBy[o.ID()] = o
	}
	newBy := map[string]*object{}
	ids := map[string]bool{}
	for _, o := range new {
		newBy[o.ID()] = o
		ids[o.ID()] = true
	}
	for id := range oldBy {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		o, n := oldBy[id], newBy[id]
		switch {
		case o == nil:
			d.added++
			fmt.Fprintf(&d.text, "+ %s (added)\n", id)
			writePrefixed(&d.text, "  + ", n.Text)
		case n == nil:
			d.removed++
			fmt.Fprintf(&d.text, "- %s (removed)\n", id)
			writePrefixed(&d.text, "  - ", o.Text)
		case strings.TrimSpace(o.Text) == strings.TrimSpace(n.Text):
			d.same++
		default:
			d.changed++
			fmt.Fprintf(&d.text, "~ %s (changed)\n", id)
			u, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A:        difflib.SplitLines(strings.TrimSpace(o.Text) + "\n"),
				B:        difflib.SplitLines(strings.TrimSpace(n.Text) + "\n"),
				FromFile: "deployed",
				ToFile:   "planned",
				Context:  3,
			})
			writePrefixed(&d.text, "  ", u)
		}
	}
	return d
}

func writePrefixed(b *strings.Builder, prefix, text string) {
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString(prefix)
		b.WriteString(l)
		b.WriteByte('\n')
	}
}
