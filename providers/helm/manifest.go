package helm

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/podsecurity"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Manifest is the kubernetes_manifest step type.
const Manifest = "kubernetes_manifest"

// manAttrs are the attributes of a kubernetes_manifest step.
type manAttrs struct {
	Files       []string  `cty:"files" doc:"YAML files relative to the runbook, each of one or more documents."`
	Objects     cty.Value `cty:"objects" doc:"Objects as HCL: a list of { apiVersion, kind, metadata, ... }."`
	Namespace   string    `cty:"namespace" doc:"The namespace of namespaced objects that name none; default \"default\"."`
	WaitFor     string    `cty:"wait_for" doc:"A condition to wait for on every object that has a status (\"Available\", \"Bound\", \"Complete\", \"Ready\", \"Established\"): condition type=True, or status.phase."`
	WaitTimeout string    `cty:"wait_timeout" doc:"How long wait_for may take, \"5m\" by default."`
	Kubeconfig  string    `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// manifestOut are the outputs of a kubernetes_manifest step.
type manifestOut struct {
	Objects []string `cty:"objects"`
}

const manifestTimeout = 5 * time.Minute

var manifestStep = &sdk.StepType[*Provider, manAttrs, struct{}, manifestInverse]{
	Name:        Manifest,
	Description: "Applies raw Kubernetes objects (YAML files or HCL objects) with server-side apply (field manager migrate). The plan shows the server-side dry-run diff per object, Secrets' data redacted, and fails when a pod template violates the PodSecurity level of its namespace. Rollback deletes the objects this step created and re-applies the ones it changed as they were (a changed Secret's data cannot be restored).",
	Rollback:    "Deletes the objects it created (annotated migrate/created-by); applies the others again as they were (their prior kept in the state, except a Secret's data, which cannot be restored).",
	Outputs:     manifestOut{},
	Validate:    validateManifest,
	Read:        readManifest,
	Plan:        planManifest,
	Apply:       applyManifest,
	Revert:      revertManifest,
	// The files' contents join the step's input hash: an edited YAML file
	// is planned as an update.
	Digest: func(_ context.Context, c *call, a manAttrs) (string, phases.Diagnostics) {
		return c.Settings.digestFiles(c, a.Files)
	},
}

// digestFiles hashes files as they are on disk (age files encrypted).
func (p *Provider) digestFiles(c *call, files []string) (string, phases.Diagnostics) {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(p.abs(f))
		if err != nil {
			return "", phases.Errorf("Cannot Read File", "%s: %v.", c.Addr, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// manifestInverse says, object by object in the order applied, what
// undoes the step.
type manifestInverse struct {
	Objects []objUndo `json:"objects"`
}

type objUndo struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Delete: the step created the object.
	Delete bool `json:"delete,omitempty"`
	// Prior is the object before the step (server fields stripped), to
	// apply again; never kept for a Secret, whose data it would hold.
	Prior map[string]any `json:"prior,omitempty"`
}

func (u objUndo) id() string { return objID(u.Kind, u.Namespace, u.Name) }

func objID(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// manObj is one object of the step, with where it was written.
type manObj struct {
	src        string // "app.yaml, document 2 (line 14)" or "objects[0]"
	u          *unstructured.Unstructured
	gvr        k8sschema.GroupVersionResource
	namespaced bool
	// crd names the step's own CRD that serves the object's kind, when
	// the cluster does not serve it yet.
	crd string
}

func (o *manObj) id() string { return objID(o.u.GetKind(), o.u.GetNamespace(), o.u.GetName()) }

// output is the object as the objects output lists it: kind/namespace/name,
// or kind/name when cluster-scoped.
func (o *manObj) output() string {
	if ns := o.u.GetNamespace(); ns != "" {
		return o.u.GetKind() + "/" + ns + "/" + o.u.GetName()
	}
	return o.u.GetKind() + "/" + o.u.GetName()
}

func (o *manObj) isSecret() bool { return o.u.GetKind() == "Secret" && o.u.GetAPIVersion() == "v1" }

func validateManifest(c *call, a *manAttrs) phases.Diagnostics {
	if c.Null("wait_timeout") || a.WaitTimeout == "" {
		a.WaitTimeout = "5m"
	}
	var diags phases.Diagnostics
	if d, err := time.ParseDuration(a.WaitTimeout); err != nil || d <= 0 {
		diags = append(diags, phases.Errorf("Invalid Timeout", "wait_timeout of %s must be a positive duration such as \"5m\", not %q.", c.Addr, a.WaitTimeout)...)
	}
	objects := 0
	if v := a.Objects; !c.Null("objects") {
		if !v.Type().IsListType() && !v.Type().IsTupleType() {
			diags = append(diags, phases.Errorf("Incorrect Attribute Type", "The \"objects\" attribute of %s must be a list of objects, not %s.", c.Addr, v.Type().FriendlyName())...)
		} else {
			objects = v.LengthInt()
		}
	}
	if len(a.Files)+objects == 0 {
		diags = append(diags, phases.Errorf("No Objects", "%s has no objects: set files (YAML files relative to the runbook), objects (HCL objects), or both.", c.Addr)...)
	}
	return diags
}

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

type manPlan = sdk.Plan[struct{}]

func planManifest(ctx context.Context, c *call, a manAttrs, _ *sdk.Prior[struct{}, manifestInverse]) manPlan {
	p := c.Settings
	objs, diags := p.loadObjects(c, a)
	if diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	if diags := checkWaitFor(c, a, objs); diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if cl == nil && !isNoKubeconfig(diags) {
		return manPlan{Diagnostics: diags}
	}
	if diags := p.mapObjects(c, cl, a, objs); diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	var b strings.Builder
	lines, diags := p.manifestPreflight(ctx, c, cl, objs)
	if diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	if cl == nil {
		fmt.Fprintf(&b, "%s: the live objects; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\n", sdk.UnknownText)
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
		var added []*object
		for _, o := range objs {
			added = append(added, p.shown(o, o.u.Object))
		}
		d := diffObjects(nil, added)
		fmt.Fprintf(&b, "objects: %d to add unless the cluster already has them\n", d.added)
		b.WriteString(d.text.String())
		return manPlan{Diff: b.String()}
	}
	dyn, err := dynamic.NewForConfig(cl.rest)
	if err != nil {
		return manPlan{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	var old, planned []*object
	var irreversible []string
	for _, o := range objs {
		if o.crd != "" {
			u := desired(c, o, nil)
			planned = append(planned, p.shown(o, u.Object))
			continue
		}
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		live, err := getLive(ctx, ri, o.u.GetName())
		if err != nil {
			return manPlan{Diagnostics: apiErr(c, cl, err, "Cannot Read Object", "%s: reading %s: %v.", c.Addr, o.id(), err)}
		}
		u := desired(c, o, live)
		dry, err := ri.Apply(ctx, o.u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil && live == nil && apierrors.IsNotFound(err):
			dry = u // its namespace does not exist yet: an earlier step makes it
		case err != nil:
			diags = append(diags, applyErr(c, o, err)...)
			continue
		}
		if live == nil {
			planned = append(planned, p.shown(o, u.Object))
			continue
		}
		if o.isSecret() {
			scrubSecretValues(c, live.Object)
			scrubSecretValues(c, dry.Object)
		}
		was, will := p.shown(o, live.Object), p.shown(o, dry.Object)
		old, planned = append(old, was), append(planned, will)
		if o.isSecret() && live.GetAnnotations()[createdBy] != c.Addr.String() && was.Text != will.Text {
			irreversible = append(irreversible, o.id())
		}
	}
	if diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	d := diffObjects(old, planned)
	fmt.Fprintf(&b, "objects: %d to add, %d to change, %d unchanged\n", d.added, d.changed, d.same)
	b.WriteString(d.text.String())
	r := manPlan{Diff: b.String()}
	if len(irreversible) > 0 {
		r.Irreversible = fmt.Sprintf("rollback cannot restore the data of %s, which existed before this step: its data is not kept", strings.Join(irreversible, ", "))
		fmt.Fprintf(&b, "! %s\n", r.Irreversible)
		r.Diff = b.String()
	}
	return r
}

// podKinds carry pod templates.
var podKinds = map[string]bool{"Pod": true, "Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true, "Job": true, "CronJob": true}

// manifestPreflight checks the pod templates against the PodSecurity
// level their namespace will have, as releases are checked.
func (p *Provider) manifestPreflight(ctx context.Context, c *call, cl *cluster, objs []*manObj) ([]string, phases.Diagnostics) {
	byNS := map[string][]string{}
	for _, o := range objs {
		if podKinds[o.u.GetKind()] {
			b, err := yaml.Marshal(o.u.Object)
			if err != nil {
				return nil, phases.FromError("Cannot Check PodSecurity", err)
			}
			byNS[o.u.GetNamespace()] = append(byNS[o.u.GetNamespace()], string(b))
		}
	}
	var lines []string
	var diags phases.Diagnostics
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		level, why := p.levelOf(ctx, cl, ns)
		lines = append(lines, fmt.Sprintf("namespace %s: PodSecurity %s (%s)", ns, level, why))
		findings, err := podsecurity.Evaluate([]byte(strings.Join(byNS[ns], "\n---\n")), level, ns)
		if err != nil {
			diags = append(diags, phases.Errorf("PodSecurity Check Failed", "%s: the pod templates in namespace %s cannot be checked: %v.", c.Addr, ns, err)...)
			continue
		}
		if len(findings) == 0 {
			continue
		}
		var m strings.Builder
		fmt.Fprintf(&m, "%s would create pods that namespace %q (PodSecurity %q) rejects:\n", c.Addr, ns, level)
		for _, f := range findings {
			fmt.Fprintf(&m, "  - %s\n", f)
		}
		fmt.Fprintf(&m, "Fix: if these pods really need it, label the namespace with a kubernetes_namespace step (pod_security = \"privileged\") that this step depends on; else change the pod template until it meets %q. The API server would accept such a Deployment, and its pods would then never be created.", level)
		v := phases.Errorf("PodSecurity Violation", "%s", m.String())
		v[0].Definite = true
		diags = append(diags, v...)
	}
	return lines, diags
}

type manApply = sdk.Apply[struct{}, manifestInverse]

func applyManifest(ctx context.Context, c *call, a manAttrs, _ struct{}, prior *sdk.Prior[struct{}, manifestInverse]) manApply {
	p := c.Settings
	objs, diags := p.loadObjects(c, a)
	if diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	if diags := p.mapObjects(c, cl, a, objs); diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	if _, diags := p.manifestPreflight(ctx, c, cl, objs); diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	dyn, err := dynamic.NewForConfig(cl.rest)
	if err != nil {
		return manApply{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	// Applied again: what undoes the first apply stays.
	before := map[string]objUndo{}
	var inv manifestInverse
	if prior != nil && prior.Inverse != nil {
		for _, u := range prior.Inverse.Data.Objects {
			before[u.id()] = u
			inv.Objects = append(inv.Objects, u)
		}
	}
	inverse := func() *sdk.Inverse[manifestInverse] { return manifestInverseOf(inv) }
	var outs []string
	for _, o := range objs {
		if o.crd != "" {
			if err := waitEstablished(ctx, c, cl, dyn, o.crd); err != nil {
				return manApply{Diagnostics: phases.Errorf("Cannot Apply Object", "%s: %s (%s) needs its CustomResourceDefinition %s: %v.", c.Addr, o.id(), o.src, o.crd, err), Inverse: inverse()}
			}
		}
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		live, err := getLive(ctx, ri, o.u.GetName())
		if err != nil {
			return manApply{Diagnostics: apiErr(c, cl, err, "Cannot Read Object", "%s: reading %s: %v.", c.Addr, o.id(), err), Inverse: inverse()}
		}
		undo, known := before[o.id()]
		if !known {
			undo = objUndo{APIVersion: o.u.GetAPIVersion(), Kind: o.u.GetKind(), Namespace: o.u.GetNamespace(), Name: o.u.GetName()}
			switch {
			case live == nil || live.GetAnnotations()[createdBy] == c.Addr.String():
				undo.Delete = true
			case o.isSecret():
				c.Log.Printf("%s existed: rollback will leave its data as this step sets it", o.id())
			default:
				undo.Prior = clean(live.Object)
			}
		}
		if _, err := ri.Apply(ctx, o.u.GetName(), desired(c, o, live), metav1.ApplyOptions{FieldManager: fieldManager}); err != nil {
			return manApply{Diagnostics: applyErr(c, o, err), Inverse: inverse()}
		}
		if !known {
			inv.Objects = append(inv.Objects, undo)
		}
		verb := "configured"
		if live == nil {
			verb = "created"
		}
		c.Log.Printf("%s %s", o.id(), verb)
		outs = append(outs, o.output())
	}
	if a.WaitFor != "" {
		if diags, stopped := waitObjects(ctx, c, cl, dyn, a, objs); diags.HasErrors() {
			return manApply{Diagnostics: diags, Inverse: inverse(), Stopped: stopped}
		}
	}
	return manApply{Outputs: manifestOut{Objects: outs}, Inverse: inverse()}
}

var crdResource = k8sschema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitEstablished waits (up to a minute) until a CRD the step just
// applied is Established, then reads discovery again.
func waitEstablished(ctx context.Context, c *call, cl *cluster, dyn dynamic.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		state := ""
		if err != nil {
			state = err.Error()
		} else if state = condState(crd.Object, "Established"); state == "" {
			if r, ok := cl.mapper.(meta.ResettableRESTMapper); ok {
				r.Reset()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("it is not Established: %s", state)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func manifestInverseOf(inv manifestInverse) *sdk.Inverse[manifestInverse] {
	var del, back int
	for _, u := range inv.Objects {
		switch {
		case u.Delete:
			del++
		case u.Prior != nil:
			back++
		}
	}
	return &sdk.Inverse[manifestInverse]{Description: fmt.Sprintf("delete the %d object(s) this step created, apply %d changed one(s) again as they were", del, back), Data: inv}
}

// noStatus are kinds wait_for does not wait on: they report no condition.
var noStatus = map[string]bool{
	"ConfigMap": true, "Secret": true, "ServiceAccount": true, "Role": true, "RoleBinding": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Service": true, "Namespace": true,
	"NetworkPolicy": true, "Ingress": true, "IngressClass": true, "StorageClass": true,
	"PriorityClass": true, "LimitRange": true, "ResourceQuota": true, "Endpoints": true,
	"EndpointSlice": true, "PodDisruptionBudget": true,
}

// conditionsOf are the conditions (or, for a PVC, the phases) the built-in
// kinds report: a wait_for one of them never reports waits out its
// timeout, so the plan refuses it.
var conditionsOf = map[string][]string{
	"Deployment":            {"Available", "Progressing", "ReplicaFailure"},
	"ReplicaSet":            {"ReplicaFailure"},
	"StatefulSet":           {},
	"DaemonSet":             {},
	"Job":                   {"Complete", "Failed", "Suspended", "SuccessCriteriaMet", "FailureTarget"},
	"Pod":                   {"Ready", "PodScheduled", "Initialized", "ContainersReady", "PodReadyToStartContainers"},
	"PersistentVolumeClaim": {"Bound", "Pending", "Lost", "Resizing", "FileSystemResizePending"},
	"PersistentVolume":      {"Available", "Bound", "Released", "Failed"},
}

// checkWaitFor refuses a wait_for that a built-in kind of the step never
// reports (a Job waited on for "Available"), naming the kind's own.
func checkWaitFor(c *call, a manAttrs, objs []*manObj) phases.Diagnostics {
	if a.WaitFor == "" {
		return nil
	}
	for _, o := range objs {
		known, ok := conditionsOf[o.u.GetKind()]
		if !ok || slices.Contains(known, a.WaitFor) {
			continue
		}
		has := "no condition migrate can wait for"
		if len(known) > 0 {
			has = "only " + strings.Join(known, ", ")
		}
		return phases.Errorf("Invalid Wait Condition", "%s waits for %q on every object, but %s %s never reports it (it has %s). Put objects that report different conditions in steps of their own, each with its own wait_for.", c.Addr, a.WaitFor, o.u.GetKind(), o.u.GetName(), has)
	}
	return nil
}

// waitObjects waits until every object with a status has the condition
// wait_for (type=True), or the phase of that name (a PVC's Bound). A
// gentle stop (c.Stop) ends the wait at once: stopped, the objects
// applied, the wait not done.
func waitObjects(ctx context.Context, c *call, cl *cluster, dyn dynamic.Interface, a manAttrs, objs []*manObj) (_ phases.Diagnostics, stopped bool) {
	limit, _ := time.ParseDuration(a.WaitTimeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, o := range objs {
		if noStatus[o.u.GetKind()] || o.u.GetKind() == "CustomResourceDefinition" && a.WaitFor != "Established" {
			continue
		}
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		last := ""
		for {
			live, err := ri.Get(ctx, o.u.GetName(), metav1.GetOptions{})
			state := ""
			if err != nil {
				state = err.Error()
			} else if state = condState(live.Object, a.WaitFor); state == "" {
				c.Log.Printf("%s is %s", o.id(), a.WaitFor)
				break
			} else if why := failed(live.Object); why != "" && a.WaitFor != "Failed" {
				return phases.Errorf("Object Failed", "%s: %s failed instead of becoming %s: %s.", c.Addr, o.id(), a.WaitFor, why), false
			}
			if ctx.Err() == nil || last == "" {
				if state != last {
					c.Log.Printf("waiting for %s to be %s: %s", o.id(), a.WaitFor, state)
				}
				last = state
			}
			select {
			case <-c.Stop:
				c.Log.Printf("stopped waiting for %s to be %s: %s", o.id(), a.WaitFor, last)
				return sdk.StoppedWaiting(c.Addr, fmt.Sprintf("its %d object(s) are applied", len(objs)),
					fmt.Sprintf("%s becoming %s (wait_for; last seen: %s)", o.id(), a.WaitFor, last)), true
			case <-ctx.Done():
				if errors.Is(parent.Err(), context.Canceled) {
					return sdk.Interrupted(c.Addr, parent.Err()), false
				}
				return phases.Errorf("Wait Timed Out", "%s: %s did not become %s within wait_timeout (%s): %s. Its objects are applied; run again to wait again, or raise wait_timeout.", c.Addr, o.id(), a.WaitFor, a.WaitTimeout, last), false
			case <-time.After(time.Second):
			}
		}
	}
	return nil, false
}

// condState is "" when obj has the condition cond=True or is in the
// phase cond, else what it shows instead.
func condState(obj map[string]any, cond string) string {
	phase, _, _ := unstructured.NestedString(obj, "status", "phase")
	if phase == cond {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	var seen []string
	for _, x := range conds {
		m, _ := x.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		if typ == cond && status == "True" {
			return ""
		}
		s := typ + "=" + status
		if r, _ := m["reason"].(string); r != "" {
			s += " (" + r + ")"
		}
		seen = append(seen, s)
	}
	var parts []string
	if phase != "" {
		parts = append(parts, "status.phase is "+phase)
	}
	if len(seen) > 0 {
		parts = append(parts, "conditions "+strings.Join(seen, ", "))
	}
	if len(parts) == 0 {
		return "no status yet"
	}
	return strings.Join(parts, "; ")
}

// failed is the reason and message of a Failed=True condition (a Job's),
// else "": waiting longer would not help.
func failed(obj map[string]any) string {
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Failed" && m["status"] == "True" {
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return strings.Trim(reason+": "+clipText(msg), ": ")
		}
	}
	return ""
}

type manRead = sdk.Read[manifestInverse]

func readManifest(ctx context.Context, c *call, a manAttrs, prior *sdk.Prior[struct{}, manifestInverse]) manRead {
	p := c.Settings
	objs, diags := p.loadObjects(c, a)
	if diags.HasErrors() {
		return manRead{Diagnostics: diags}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return manRead{Diagnostics: diags}
	}
	if diags := p.mapObjects(c, cl, a, objs); diags.HasErrors() {
		return manRead{Diagnostics: diags}
	}
	dyn, err := dynamic.NewForConfig(cl.rest)
	if err != nil {
		return manRead{Diagnostics: phases.FromError("Cannot Reach Kubernetes", err)}
	}
	var missing, changed, outs []string
	var inv manifestInverse
	for _, o := range objs {
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		live, err := getLive(ctx, ri, o.u.GetName())
		if err != nil {
			return manRead{Diagnostics: apiErr(c, cl, err, "Cannot Read Object", "%s: reading %s: %v.", c.Addr, o.id(), err)}
		}
		if live == nil {
			missing = append(missing, o.id())
			continue
		}
		outs = append(outs, o.output())
		// Changed outside migrate: the dry run of the step's object
		// differs from the live one.
		dry, err := ri.Apply(ctx, o.u.GetName(), desired(c, o, live), metav1.ApplyOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
		switch {
		case apierrors.IsConflict(err):
			changed = append(changed, o.id()+" (another manager took fields over)")
		case err == nil:
			if o.isSecret() {
				scrubSecretValues(c, live.Object)
			}
			if p.shown(o, live.Object).Text != p.shown(o, dry.Object).Text {
				changed = append(changed, o.id())
			}
		}
		if live.GetAnnotations()[createdBy] == c.Addr.String() {
			inv.Objects = append(inv.Objects, objUndo{APIVersion: o.u.GetAPIVersion(), Kind: o.u.GetKind(), Namespace: o.u.GetNamespace(), Name: o.u.GetName(), Delete: true})
		}
	}
	if len(missing) > 0 {
		return manRead{Observation: providers.Absent, Detail: "missing: " + strings.Join(missing, ", ")}
	}
	r := manRead{Observation: providers.Present, Outputs: manifestOut{Objects: outs}}
	if len(changed) > 0 {
		r.Observation, r.Detail = providers.Drifted, "changed outside migrate: "+strings.Join(changed, ", ")
	}
	if prior == nil {
		// Resumed after an apply that was not recorded: the objects it
		// marked as created are its to delete; the others are left.
		r.Inverse = manifestInverseOf(inv)
	}
	return r
}

func revertManifest(ctx context.Context, c *call, a manAttrs, u sdk.Undo[manifestInverse]) phases.Diagnostics {
	p := c.Settings
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return diags
	}
	dyn, err := dynamic.NewForConfig(cl.rest)
	if err != nil {
		return phases.FromError("Cannot Reach Kubernetes", err)
	}
	undos := u.Data.Objects
	// A name the state keeps only the place of (it was sensitive) is
	// taken from the step's objects again, in the same order.
	if objs, d := p.loadObjects(c, a); !d.HasErrors() && p.mapObjects(c, cl, a, objs) == nil && len(objs) >= len(undos) {
		for i := range undos {
			x, o := &undos[i], objs[i]
			x.APIVersion = kept(x.APIVersion, o.u.GetAPIVersion(), "")
			x.Kind = kept(x.Kind, o.u.GetKind(), "")
			x.Namespace = kept(x.Namespace, o.u.GetNamespace(), "")
			x.Name = kept(x.Name, o.u.GetName(), "")
		}
	}
	var out phases.Diagnostics
	for i := len(undos) - 1; i >= 0; i-- {
		x := undos[i]
		if !x.Delete && x.Prior == nil {
			continue
		}
		gv, err := k8sschema.ParseGroupVersion(x.APIVersion)
		if err != nil || strings.Contains(x.Name, phases.Redacted) {
			out = append(out, phases.Errorf("Invalid Inverse", "%s: the recorded object %s cannot be found again.", c.Addr, x.id())...)
			continue
		}
		m, err := cl.mapping(gv.WithKind(x.Kind))
		if meta.IsNoMatchError(err) {
			c.Log.Printf("%s: its kind is no longer served: nothing to undo", x.id())
			continue
		}
		if err != nil {
			out = append(out, phases.Errorf("Cannot Revert Object", "%s: %s: %v.", c.Addr, x.id(), err)...)
			continue
		}
		ri := resourceOf(dyn, m.Resource, x.Namespace)
		if x.Delete {
			bg := metav1.DeletePropagationBackground
			if err := ri.Delete(ctx, x.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
				out = append(out, phases.Errorf("Cannot Delete Object", "%s: deleting %s: %v.", c.Addr, x.id(), err)...)
				continue
			}
			c.Log.Printf("deleted %s", x.id())
			continue
		}
		obj := &unstructured.Unstructured{Object: x.Prior}
		if _, err := ri.Apply(ctx, x.Name, obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			out = append(out, phases.Errorf("Cannot Restore Object", "%s: applying %s again as it was: %v.", c.Addr, x.id(), err)...)
			continue
		}
		c.Log.Printf("applied %s again as it was before the step", x.id())
	}
	return out
}
