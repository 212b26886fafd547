package helm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
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

var manifestStep = &sdk.StepType[*Provider, manAttrs, struct{}, manifestRevert]{
	Name:        Manifest,
	Description: "Applies raw Kubernetes objects (YAML files or HCL objects) with server-side apply (field manager migrate). The plan shows the server-side dry-run diff per object, Secrets' data redacted, and fails when a pod template violates the PodSecurity level of its namespace. Rollback deletes the objects this step created and re-applies the ones it changed as they were (a changed Secret's data cannot be restored).",
	Rollback:    "Deletes the objects it created (annotated migrate/created-by); applies the others again as they were (their prior kept in the state; a replaced ConfigMap kept instead in a Secret beside it, NAME.configmap.migrate-orig, deleted once restored; a Secret's data is not kept and cannot be restored).",
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

// manifestRevert says, object by object in the order applied, what
// undoes the step.
type manifestRevert struct {
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
	// apply again; never kept for a Secret, whose data it would hold, nor
	// for a ConfigMap (PriorCopy).
	Prior map[string]any `json:"prior,omitempty"`
	// PriorCopy names the Secret, in the object's namespace, that holds a
	// replaced ConfigMap as it was: its data is often a configuration
	// file with a password in it, which belongs in the cluster's Secrets
	// (encrypted at rest), not in the state.
	PriorCopy string `json:"prior_copy,omitempty"`
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

func (o *manObj) isConfigMap() bool {
	return o.u.GetKind() == "ConfigMap" && o.u.GetAPIVersion() == "v1"
}

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

// manTarget is what read, plan and apply of a kubernetes_manifest step
// start from: its objects, mapped to the resources of its cluster, and a
// dynamic client of that cluster.
type manTarget struct {
	objs []*manObj
	cl   *cluster
	dyn  dynamic.Interface
}

// manifestTarget loads the step's objects, reaches its cluster and maps
// the objects to its resources. planning also refuses a wait_for the
// objects never report, and gives a target without a cluster (cl and dyn
// nil) when the kubeconfig is not written yet: the plan then says what it
// can without one.
func (p *Provider) manifestTarget(ctx context.Context, c *call, a manAttrs, planning bool) (manTarget, phases.Diagnostics) {
	var t manTarget
	objs, diags := p.loadObjects(c, a)
	if diags.HasErrors() {
		return t, diags
	}
	if planning {
		if diags := checkWaitFor(c, a, objs); diags.HasErrors() {
			return t, diags
		}
	}
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if cl == nil && !(planning && isNoKubeconfig(diags)) {
		return t, diags
	}
	if diags := p.mapObjects(c, cl, a, objs); diags.HasErrors() {
		return t, diags
	}
	t.objs, t.cl = objs, cl
	if cl == nil {
		return t, nil
	}
	dyn, err := dynamic.NewForConfig(cl.rest)
	if err != nil {
		return manTarget{}, phases.FromError("Cannot Reach Kubernetes", err)
	}
	t.dyn = dyn
	return t, nil
}

type manPlan = sdk.Plan[struct{}]

func planManifest(ctx context.Context, c *call, a manAttrs, _ *sdk.Prior[struct{}, manifestRevert]) manPlan {
	p := c.Settings
	t, diags := p.manifestTarget(ctx, c, a, true)
	if diags.HasErrors() {
		return manPlan{Diagnostics: diags}
	}
	objs, cl, dyn := t.objs, t.cl, t.dyn
	var b strings.Builder
	lines, diags := p.manifestPreflight(ctx, c, cl, a.Kubeconfig, objs, true)
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
// level their namespace will have, and against the nodes that would run
// them, as releases are checked.
func (p *Provider) manifestPreflight(ctx context.Context, c *call, cl *cluster, kubeconfig string, objs []*manObj, planning bool) ([]string, phases.Diagnostics) {
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
	var docs []string
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		docs = append(docs, byNS[ns]...)
	}
	if len(docs) == 0 || !planning {
		return lines, diags
	}
	line, d := p.schedulingPreflight(ctx, cl, kubeconfig, c.Addr.String(), "default", docs)
	return append(lines, line), append(diags, d...)
}

type manApply = sdk.Apply[struct{}, manifestRevert]

func applyManifest(ctx context.Context, c *call, a manAttrs, _ struct{}, prior *sdk.Prior[struct{}, manifestRevert]) manApply {
	p := c.Settings
	t, diags := p.manifestTarget(ctx, c, a, false)
	if diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	objs, cl, dyn := t.objs, t.cl, t.dyn
	if _, diags := p.manifestPreflight(ctx, c, cl, a.Kubeconfig, objs, false); diags.HasErrors() {
		return manApply{Diagnostics: diags}
	}
	// Applied again: what undoes the first apply stays.
	before := map[string]objUndo{}
	var inv manifestRevert
	if prior != nil && prior.Revert != nil {
		for _, u := range prior.Revert.Data.Objects {
			before[u.id()] = u
			inv.Objects = append(inv.Objects, u)
		}
	}
	revertOf := func() *sdk.RevertData[manifestRevert] { return manifestRevertOf(inv) }
	var outs []string
	for _, o := range objs {
		if o.crd != "" {
			if err := waitEstablished(ctx, c, cl, dyn, o.crd); err != nil {
				return manApply{Diagnostics: phases.Errorf("Cannot Apply Object", "%s: %s (%s) needs its CustomResourceDefinition %s: %v.", c.Addr, o.id(), o.src, o.crd, err), Revert: revertOf()}
			}
		}
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		live, err := getLive(ctx, ri, o.u.GetName())
		if err != nil {
			return manApply{Diagnostics: apiErr(c, cl, err, "Cannot Read Object", "%s: reading %s: %v.", c.Addr, o.id(), err), Revert: revertOf()}
		}
		undo, known := before[o.id()]
		if !known {
			undo = objUndo{APIVersion: o.u.GetAPIVersion(), Kind: o.u.GetKind(), Namespace: o.u.GetNamespace(), Name: o.u.GetName()}
			switch {
			case live == nil || live.GetAnnotations()[createdBy] == c.Addr.String():
				undo.Delete = true
			case o.isSecret():
				c.Log.Printf("%s existed: rollback will leave its data as this step sets it", o.id())
			case o.isConfigMap():
				name, err := keepConfigMap(ctx, c, cl, live)
				if err != nil {
					return manApply{Diagnostics: apiErr(c, cl, err, "Cannot Keep Object", "%s: keeping %s as it was, for rollback: %v.", c.Addr, o.id(), err), Revert: revertOf()}
				}
				undo.PriorCopy = name
			default:
				undo.Prior = clean(live.Object)
			}
		}
		if _, err := ri.Apply(ctx, o.u.GetName(), desired(c, o, live), metav1.ApplyOptions{FieldManager: fieldManager}); err != nil {
			return manApply{Diagnostics: applyErr(c, o, err), Revert: revertOf()}
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
			return manApply{Diagnostics: diags, Revert: revertOf(), Stopped: stopped}
		}
	}
	return manApply{Outputs: manifestOut{Objects: outs}, Revert: revertOf()}
}

func manifestRevertOf(inv manifestRevert) *sdk.RevertData[manifestRevert] {
	var del, back int
	for _, u := range inv.Objects {
		switch {
		case u.Delete:
			del++
		case u.Prior != nil || u.PriorCopy != "":
			back++
		}
	}
	return &sdk.RevertData[manifestRevert]{Description: fmt.Sprintf("delete the %d object(s) this step created, apply %d changed one(s) again as they were", del, back), Data: inv}
}

type manRead = sdk.Read[manifestRevert]

func readManifest(ctx context.Context, c *call, a manAttrs, prior *sdk.Prior[struct{}, manifestRevert]) manRead {
	p := c.Settings
	t, diags := p.manifestTarget(ctx, c, a, false)
	if diags.HasErrors() {
		return manRead{Diagnostics: diags}
	}
	objs, cl, dyn := t.objs, t.cl, t.dyn
	var missing, changed, outs []string
	var inv manifestRevert
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
		r.Revert = manifestRevertOf(inv)
	}
	return r
}

func revertManifest(ctx context.Context, c *call, a manAttrs, u sdk.Applied[manifestRevert]) phases.Diagnostics {
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
		if !x.Delete && x.Prior == nil && x.PriorCopy == "" {
			continue
		}
		gv, err := k8sschema.ParseGroupVersion(x.APIVersion)
		if err != nil || strings.Contains(x.Name, phases.Redacted) {
			out = append(out, phases.Errorf("Invalid Revert", "%s: the recorded object %s cannot be found again.", c.Addr, x.id())...)
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
		prior, gone, err := x.prior(ctx, cl)
		if err != nil {
			out = append(out, phases.Errorf("Cannot Restore Object", "%s: reading the copy of %s kept for rollback: %v.", c.Addr, x.id(), err)...)
			continue
		}
		if gone {
			c.Log.Printf("%s: no copy %s left: already restored", x.id(), x.PriorCopy)
			continue
		}
		obj := &unstructured.Unstructured{Object: prior}
		if _, err := ri.Apply(ctx, x.Name, obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			out = append(out, phases.Errorf("Cannot Restore Object", "%s: applying %s again as it was: %v.", c.Addr, x.id(), err)...)
			continue
		}
		c.Log.Printf("applied %s again as it was before the step", x.id())
		if x.PriorCopy != "" {
			if err := cl.client.CoreV1().Secrets(x.Namespace).Delete(ctx, x.PriorCopy, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				out = append(out, phases.Errorf("Cannot Delete Object", "%s: deleting the copy %s/%s once restored: %v.", c.Addr, x.Namespace, x.PriorCopy, err)...)
			}
		}
	}
	return out
}
