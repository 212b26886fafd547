package helm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/homelab-migrate/migrate/phases"
)

// The objects of a kubernetes_manifest step: read from YAML files and HCL,
// mapped to the resources of the cluster, and shown in plans as they are
// applied (Secrets' values redacted).

// loadObjects reads the step's objects: each document of each file, then
// each HCL object. Secrets' values are taught to the scrubber.
func (p *Provider) loadObjects(c *call, a manAttrs) ([]*manObj, phases.Diagnostics) {
	var out []*manObj
	var diags phases.Diagnostics
	bad := func(summary, format string, args ...any) {
		diags = append(diags, phases.Errorf(summary, format, args...)...)
	}
	add := func(src string, raw []byte) {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			bad("Invalid Object", "%s: %s is not an object (a mapping with apiVersion, kind and metadata).", c.Addr, src)
			return
		}
		apiVersion, _ := m["apiVersion"].(string)
		kind, _ := m["kind"].(string)
		if apiVersion == "" || kind == "" {
			bad("Invalid Object", "%s: %s has no apiVersion or kind.", c.Addr, src)
			return
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			bad("Invalid Object", "%s: %s (%s %s) cannot be read: %v.", c.Addr, src, apiVersion, kind, err)
			return
		}
		if u.GetName() == "" {
			bad("Object Without a Name", "%s: %s (%s %s) has no metadata.name; every object needs one (generateName is not supported: the step must find it again).", c.Addr, src, apiVersion, kind)
			return
		}
		o := &manObj{src: src, u: u}
		if o.isSecret() {
			scrubSecretValues(c, u.Object)
		}
		out = append(out, o)
	}
	for _, f := range a.Files {
		b, err := os.ReadFile(p.abs(f))
		if err != nil {
			bad("Cannot Read Manifest", "%s: reading %s: %v.", c.Addr, f, err)
			continue
		}
		n := 0
		for _, d := range splitYAML(string(b)) {
			raw, err := yaml.YAMLToJSON([]byte(d.text))
			if err != nil {
				msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(s string) string {
					l, _ := strconv.Atoi(s[len("line "):])
					return fmt.Sprintf("line %d", l+d.line-1)
				})
				bad("Invalid YAML", "%s: %s, the document at line %d, is not valid YAML: %s.", c.Addr, f, d.line, msg)
				continue
			}
			if s := strings.TrimSpace(string(raw)); s == "null" || s == "" {
				continue // empty, or only comments
			}
			n++
			add(fmt.Sprintf("%s, document %d (line %d)", f, n, d.line), raw)
		}
	}
	if v := a.Objects; v != cty.NilVal && !v.IsNull() && (v.Type().IsListType() || v.Type().IsTupleType()) {
		i := 0
		for it := v.ElementIterator(); it.Next(); i++ {
			_, e := it.Element()
			raw, err := ctyjson.Marshal(e, e.Type())
			if err != nil {
				bad("Invalid Object", "%s: objects[%d] cannot be turned into JSON: %v.", c.Addr, i, err)
				continue
			}
			add(fmt.Sprintf("objects[%d]", i), raw)
		}
	}
	// Namespaces and CRDs first, as kubectl and Helm order them.
	sort.SliceStable(out, func(i, j int) bool { return kindRank(out[i].u.GetKind()) < kindRank(out[j].u.GetKind()) })
	return out, diags
}

func kindRank(kind string) int {
	switch kind {
	case "Namespace":
		return 0
	case "CustomResourceDefinition":
		return 1
	}
	return 2
}

// scrubSecretValues teaches the scrubber a Secret's values, as written and
// decoded: a diff or an error of the API server must never show them.
func scrubSecretValues(c *call, obj map[string]any) {
	for _, field := range []string{"data", "stringData"} {
		d, _ := obj[field].(map[string]any)
		for _, v := range d {
			s := fmt.Sprint(v)
			c.Scrub.Add(s)
			if field == "data" {
				if b, err := base64.StdEncoding.DecodeString(s); err == nil {
					c.Scrub.Add(string(b))
				}
			} else {
				c.Scrub.Add(base64.StdEncoding.EncodeToString([]byte(s)))
			}
		}
	}
}

type yamlDoc struct {
	text string
	line int // of its first line, 1-based
}

// splitYAML splits a multi-document YAML file at its "---" lines.
func splitYAML(text string) []yamlDoc {
	var docs []yamlDoc
	var cur []string
	start := 1
	for i, l := range strings.Split(text, "\n") {
		if t := strings.TrimRight(l, " \t\r"); t == "---" || strings.HasPrefix(t, "--- ") {
			docs = append(docs, yamlDoc{strings.Join(cur, "\n"), start})
			cur, start = nil, i+2
			continue
		}
		cur = append(cur, l)
	}
	return append(docs, yamlDoc{strings.Join(cur, "\n"), start})
}

// mapObjects finds each object's resource and scope, and gives namespaced
// objects without a namespace the step's (else "default"). A kind the
// cluster does not know is looked up again after a fresh discovery (an
// earlier step may have installed its CRD), then refused.
func (p *Provider) mapObjects(c *call, cl *cluster, a manAttrs, objs []*manObj) phases.Diagnostics {
	var diags phases.Diagnostics
	for _, o := range objs {
		gvk := o.u.GroupVersionKind()
		namespaced := namespaced(nil, o.u.GetAPIVersion(), gvk.Kind)
		if cl != nil {
			m, err := cl.mapping(gvk)
			if meta.IsNoMatchError(err) {
				if crd, gvr, scoped := crdOf(objs, gvk); crd != nil {
					// Its CRD is one of the step's: applied first.
					o.gvr, o.crd, o.namespaced = gvr, crd.u.GetName(), scoped
					o.defaultNamespace(a)
					continue
				}
			}
			if err != nil {
				if meta.IsNoMatchError(err) {
					diags = append(diags, phases.Errorf("Unknown Kind", "%s: %s is a %s of apiVersion %s, which the cluster does not know. If it is a custom resource, install its CustomResourceDefinition first (in this step, or an earlier kubernetes_manifest or helm_release step this one depends on); else check the apiVersion and kind.", c.Addr, o.src, gvk.Kind, o.u.GetAPIVersion())...)
				} else {
					diags = append(diags, phases.Errorf("Cannot Map Kind", "%s: %s (%s %s): %v.", c.Addr, o.src, o.u.GetAPIVersion(), gvk.Kind, err)...)
				}
				continue
			}
			o.gvr, namespaced = m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace
		}
		o.namespaced = namespaced
		o.defaultNamespace(a)
	}
	return diags
}

func (o *manObj) defaultNamespace(a manAttrs) {
	switch {
	case !o.namespaced:
		o.u.SetNamespace("")
	case o.u.GetNamespace() == "":
		o.u.SetNamespace(orDefault(a.Namespace, "default"))
	}
}

// mapping is the REST mapping of a kind; a kind not found is looked up
// again after a fresh discovery (its CRD may be new).
func (cl *cluster) mapping(gvk k8sschema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := cl.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		if r, ok := cl.mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
			m, err = cl.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
	}
	return m, err
}

// crdOf finds, among the step's objects, the CustomResourceDefinition
// that serves gvk, and the resource and scope it defines.
func crdOf(objs []*manObj, gvk k8sschema.GroupVersionKind) (*manObj, k8sschema.GroupVersionResource, bool) {
	for _, o := range objs {
		if o.u.GetKind() != "CustomResourceDefinition" || o.u.GroupVersionKind().Group != "apiextensions.k8s.io" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.u.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.u.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(o.u.Object, "spec", "names", "plural")
		scope, _, _ := unstructured.NestedString(o.u.Object, "spec", "scope")
		versions, _, _ := unstructured.NestedSlice(o.u.Object, "spec", "versions")
		if group != gvk.Group || kind != gvk.Kind {
			continue
		}
		for _, v := range versions {
			if m, _ := v.(map[string]any); m != nil && m["name"] == gvk.Version {
				return o, k8sschema.GroupVersionResource{Group: group, Version: gvk.Version, Resource: plural}, scope == "Namespaced"
			}
		}
	}
	return nil, k8sschema.GroupVersionResource{}, false
}

// resourceOf is the client of a resource, namespaced when ns is set.
func resourceOf(dyn dynamic.Interface, gvr k8sschema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return dyn.Resource(gvr)
	}
	return dyn.Resource(gvr).Namespace(ns)
}

// clean strips what the server owns from an object: what is left is what
// a diff shows and a rollback applies again.
func clean(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "status" {
			out[k] = v
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		m := maps.Clone(md)
		for _, k := range []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink"} {
			delete(m, k)
		}
		out["metadata"] = m
	}
	return out
}

// shown is an object as the plan shows it: YAML, Secrets' values
// replaced by keyed fingerprints.
func (p *Provider) shown(o *manObj, obj map[string]any) *object {
	m := clean(obj)
	if o.isSecret() {
		// As the server stores it: stringData folded into data, so that
		// a value has one fingerprint before and after it is applied.
		if sd, ok := m["stringData"].(map[string]any); ok {
			d, _ := m["data"].(map[string]any)
			d = maps.Clone(d)
			if d == nil {
				d = map[string]any{}
			}
			for k, v := range sd {
				d[k] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
			}
			m["data"] = d
			delete(m, "stringData")
		}
		p.fingerprint(m)
	}
	b, err := yaml.Marshal(m)
	text := string(b)
	if err != nil {
		text = phases.Redacted
	}
	return &object{Kind: o.u.GetKind(), APIVersion: o.u.GetAPIVersion(), Namespace: o.u.GetNamespace(), Name: o.u.GetName(), Namespaced: o.namespaced, Text: text}
}

// conflictDiag explains a server-side apply conflict: who manages which
// field, and how migrate can take it over.
func conflictDiag(c *call, o *manObj, err error) phases.Diagnostics {
	var status apierrors.APIStatus
	var fields []string
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, cause := range status.Status().Details.Causes {
			fields = append(fields, fmt.Sprintf("%s (%s)", cause.Field, cause.Message))
		}
	}
	if len(fields) == 0 {
		fields = []string{err.Error()}
	}
	return phases.Errorf("Field Owned by Another Manager", "%s: applying %s (%s) would change fields another field manager owns:\n  %s\nmigrate does not force them. To let migrate take them over, apply the object once with kubectl apply --server-side --field-manager=%s --force-conflicts, or remove those fields from the other manager's configuration; else leave them out of this step.", c.Addr, o.id(), o.src, strings.Join(fields, "\n  "), fieldManager)
}

func applyErr(c *call, o *manObj, err error) phases.Diagnostics {
	if apierrors.IsConflict(err) {
		return conflictDiag(c, o, err)
	}
	return phases.Errorf("Cannot Apply Object", "%s: %s (%s): %v.", c.Addr, o.id(), o.src, err)
}

// desired is the object as the step applies it: marked as the step's when
// it creates it (or created it in an interrupted run).
func desired(c *call, o *manObj, live *unstructured.Unstructured) *unstructured.Unstructured {
	u := o.u.DeepCopy()
	if live == nil || live.GetAnnotations()[createdBy] == c.Addr.String() {
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[createdBy] = c.Addr.String()
		u.SetAnnotations(ann)
	}
	return u
}

// getLive reads an object; nil when it does not exist.
func getLive(ctx context.Context, ri dynamic.ResourceInterface, name string) (*unstructured.Unstructured, error) {
	live, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}
