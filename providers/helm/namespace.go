package helm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// PodSecurity levels and labels.
const (
	levelPrivileged = "privileged"
	levelBaseline   = "baseline"
	levelRestricted = "restricted"

	labelPrefix  = "pod-security.kubernetes.io/"
	labelEnforce = labelPrefix + "enforce"
)

func validLevel(l string) bool {
	return l == levelPrivileged || l == levelBaseline || l == levelRestricted
}

// nsAttrs are the attributes of a kubernetes_namespace step.
type nsAttrs struct {
	Name        string            `cty:"name" doc:"The namespace; default the step name."`
	Labels      map[string]string `cty:"labels" doc:"Labels to set."`
	Annotations map[string]string `cty:"annotations" doc:"Annotations to set."`
	PodSecurity string            `cty:"pod_security" doc:"\"privileged\", \"baseline\" or \"restricted\": written as the enforce, audit and warn labels (version latest)."`
	Kubeconfig  string            `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
}

// namespaceOut are the outputs of a kubernetes_namespace step.
type namespaceOut struct {
	Name        string `cty:"name"`
	PodSecurity string `cty:"pod_security"`
}

// Namespace is the kubernetes_namespace step type.
const Namespace = "kubernetes_namespace"

var namespaceStep = &sdk.StepType[*Provider, nsAttrs, struct{}, namespaceRevert]{
	Name:        Namespace,
	Description: "Ensures a Kubernetes namespace with labels, annotations and a PodSecurity level (the pod-security.kubernetes.io enforce, audit and warn labels). Rollback deletes it only if this step created it, else restores the previous labels.",
	Rollback:    "Deletes the namespace only if this step created it, else restores its previous labels and annotations.",
	Outputs:     namespaceOut{},
	// The plan shows what it knows, and a known level is remembered for
	// the releases of the same run.
	Unknowns: true,
	Validate: validateNamespace,
	Read:     readNamespace,
	Plan:     planNamespace,
	Apply:    applyNamespace,
	Revert:   revertNamespace,
}

// validateNamespace checks the step and completes it: the name defaults
// to the step's, and the level becomes the PodSecurity labels.
func validateNamespace(c *call, a *nsAttrs) phases.Diagnostics {
	if c.Null("name") {
		a.Name = c.Addr.Name
	}
	if a.Labels == nil {
		a.Labels = map[string]string{}
	}
	if a.Annotations == nil {
		a.Annotations = map[string]string{}
	}
	var diags phases.Diagnostics
	if !c.Unknown("name") {
		if errs := validation.IsDNS1123Label(a.Name); len(errs) > 0 {
			diags = append(diags, phases.Errorf("Invalid Namespace Name", "%q is not a valid namespace name for %s: %s.", a.Name, c.Addr, strings.Join(errs, "; "))...)
		}
	}
	if !c.Unknown("pod_security") && a.PodSecurity != "" {
		if !validLevel(a.PodSecurity) {
			diags = append(diags, phases.Errorf("Invalid PodSecurity Level", "pod_security of %s must be \"privileged\", \"baseline\" or \"restricted\", not %q.", c.Addr, a.PodSecurity)...)
		} else {
			for _, mode := range []string{"enforce", "audit", "warn"} {
				a.Labels[labelPrefix+mode] = a.PodSecurity
				a.Labels[labelPrefix+mode+"-version"] = "latest"
			}
		}
	}
	return diags
}

// remember records the level the namespace will have for later releases.
func (p *Provider) remember(a nsAttrs) {
	if l := a.Labels[labelEnforce]; validLevel(l) && a.Name != "" {
		p.setLevel(a.Name, l)
	}
}

// namespaceRevert is a kubernetes_namespace step's revert data.
type namespaceRevert struct {
	Name string `json:"name"`
	// Delete: this step created the namespace.
	Delete bool `json:"delete,omitempty"`
	// Labels and Annotations changed, with their previous values; a nil
	// value means the key did not exist.
	Labels      map[string]*string `json:"labels,omitempty"`
	Annotations map[string]*string `json:"annotations,omitempty"`
}

type nsPlan = sdk.Plan[struct{}]

func planNamespace(ctx context.Context, c *call, st nsAttrs, _ *sdk.Prior[struct{}, namespaceRevert]) nsPlan {
	if c.Unknown("name") {
		return nsPlan{Diff: "namespace (known after earlier steps apply)\n"}
	}
	p := c.Settings
	p.remember(st)
	var b strings.Builder
	if l := st.Labels[labelEnforce]; l != "" {
		fmt.Fprintf(&b, "namespace %s: PodSecurity %s\n", st.Name, l)
	}
	if !known(c, "labels", "annotations", "pod_security") {
		fmt.Fprintf(&b, "namespace %s: labels or annotations known after earlier steps apply\n", st.Name)
		return nsPlan{Diff: b.String()}
	}
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if cl == nil {
		if !isNoKubeconfig(diags) {
			return nsPlan{Diagnostics: diags}
		}
		// Marked as the SDK marks a deferred diff: the fresh plan against
		// the cluster, just before apply, may say "~" where this says "+".
		level := b.String()
		b.Reset()
		fmt.Fprintf(&b, "%s: the live namespace; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\n%s", sdk.UnknownText, level)
		fmt.Fprintf(&b, "+ namespace %s\n", st.Name)
		writeMapDiff(&b, "label", nil, st.Labels)
		writeMapDiff(&b, "annotation", nil, st.Annotations)
		return nsPlan{Diff: b.String()}
	}
	live, err := cl.client.CoreV1().Namespaces().Get(ctx, st.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(&b, "+ namespace %s\n", st.Name)
		writeMapDiff(&b, "label", nil, st.Labels)
		writeMapDiff(&b, "annotation", nil, st.Annotations)
	case err != nil:
		return nsPlan{Diagnostics: apiErr(c, cl, err, "Cannot Read Namespace", "Reading namespace %s for %s: %v.", st.Name, c.Addr, err)}
	default:
		n := b.Len()
		if live.DeletionTimestamp != nil {
			fmt.Fprintf(&b, "! namespace %s is being deleted; apply waits for it to go, then creates it\n", st.Name)
		}
		writeMapDiff(&b, "label", live.Labels, st.Labels)
		writeMapDiff(&b, "annotation", live.Annotations, st.Annotations)
		if b.Len() == n {
			fmt.Fprintf(&b, "  namespace %s exists with these labels and annotations: no change\n", st.Name)
		} else {
			s := b.String()
			b.Reset()
			b.WriteString(s[:n])
			fmt.Fprintf(&b, "~ namespace %s\n", st.Name)
			b.WriteString(s[n:])
		}
	}
	return nsPlan{Diff: b.String()}
}

func isNoKubeconfig(d phases.Diagnostics) bool {
	for _, x := range d {
		if strings.Contains(x.Detail, errNoKubeconfig.Error()) {
			return true
		}
	}
	return false
}

// writeMapDiff writes the changes that setting want over have makes; keys
// in have but not in want are kept, so they are not shown.
func writeMapDiff(b *strings.Builder, what string, have, want map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		old, ok := have[k]
		switch {
		case !ok:
			fmt.Fprintf(b, "  + %s %s = %q\n", what, k, want[k])
		case old != want[k]:
			fmt.Fprintf(b, "  ~ %s %s = %q -> %q\n", what, k, old, want[k])
		}
	}
}

type nsApply = sdk.Apply[struct{}, namespaceRevert]

func applyNamespace(ctx context.Context, c *call, st nsAttrs, _ struct{}, prior *sdk.Prior[struct{}, namespaceRevert]) nsApply {
	p := c.Settings
	p.remember(st)
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if diags.HasErrors() {
		return nsApply{Diagnostics: diags}
	}
	nsc := cl.client.CoreV1().Namespaces()
	inv := namespaceRevert{Name: st.Name}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inv = namespaceRevert{Name: st.Name}
		live, err := nsc.Get(ctx, st.Name, metav1.GetOptions{})
		if err == nil && live.DeletionTimestamp != nil {
			c.Log.Printf("namespace %s is being deleted; waiting for it to go", st.Name)
			if err := waitGone(ctx, cl, st.Name, 2*time.Minute); err != nil {
				return err
			}
			live, err = nsc.Get(ctx, st.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.Name, Labels: st.Labels, Annotations: st.Annotations}}
			if _, err := nsc.Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				return err
			}
			inv.Delete = true
			c.Log.Printf("created namespace %s", st.Name)
			return nil
		}
		if err != nil {
			return err
		}
		inv.Labels = merge(&live.Labels, st.Labels)
		inv.Annotations = merge(&live.Annotations, st.Annotations)
		if len(inv.Labels)+len(inv.Annotations) == 0 {
			c.Log.Printf("namespace %s is up to date", st.Name)
			return nil
		}
		if _, err := nsc.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.Log.Printf("updated namespace %s: %d label(s), %d annotation(s)", st.Name, len(inv.Labels), len(inv.Annotations))
		return nil
	})
	if err != nil {
		return nsApply{Diagnostics: phases.Errorf("Cannot Apply Namespace", "Applying namespace %s for %s: %v.", st.Name, c.Addr, err)}
	}
	revertOf := namespaceRevertOf(inv)
	if prior != nil && prior.Revert != nil && prior.Revert.Data.Name == st.Name {
		// Applied again: undoing goes back to before the first apply.
		revertOf = prior.Revert
	}
	return nsApply{Outputs: namespaceOutputs(st), Revert: revertOf}
}

func namespaceOutputs(st nsAttrs) namespaceOut {
	return namespaceOut{Name: st.Name, PodSecurity: st.Labels[labelEnforce]}
}

func namespaceRevertOf(inv namespaceRevert) *sdk.RevertData[namespaceRevert] {
	desc := fmt.Sprintf("restore the labels and annotations of namespace %s", inv.Name)
	switch {
	case inv.Delete:
		desc = fmt.Sprintf("delete namespace %s (this step created it)", inv.Name)
	case len(inv.Labels)+len(inv.Annotations) == 0:
		desc = fmt.Sprintf("nothing: namespace %s already was as the step wants", inv.Name)
	}
	return &sdk.RevertData[namespaceRevert]{Description: desc, Data: inv}
}

// merge sets want over *have and returns the previous values of the keys
// it changed.
func merge(have *map[string]string, want map[string]string) map[string]*string {
	if *have == nil {
		*have = map[string]string{}
	}
	prev := map[string]*string{}
	for k, v := range want {
		old, ok := (*have)[k]
		if ok && old == v {
			continue
		}
		if ok {
			prev[k] = &old
		} else {
			prev[k] = nil
		}
		(*have)[k] = v
	}
	return prev
}

type nsRead = sdk.Read[namespaceRevert]

func readNamespace(ctx context.Context, c *call, st nsAttrs, prior *sdk.Prior[struct{}, namespaceRevert]) nsRead {
	if !known(c, "name", "labels", "annotations", "pod_security", "kubeconfig") {
		return nsRead{Observation: providers.Unknown}
	}
	p := c.Settings
	p.remember(st)
	cl, diags := p.cluster(ctx, c, st.Kubeconfig)
	if diags.HasErrors() {
		return nsRead{Diagnostics: diags}
	}
	live, err := cl.client.CoreV1().Namespaces().Get(ctx, st.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nsRead{Observation: providers.Absent, Detail: fmt.Sprintf("namespace %s does not exist", st.Name)}
	}
	if err != nil {
		return nsRead{Diagnostics: apiErr(c, cl, err, "Cannot Read Namespace", "Reading namespace %s for %s: %v.", st.Name, c.Addr, err)}
	}
	if live.DeletionTimestamp != nil {
		return nsRead{Observation: providers.Absent, Detail: fmt.Sprintf("namespace %s is being deleted", st.Name)}
	}
	var diff strings.Builder
	writeMapDiff(&diff, "label", live.Labels, st.Labels)
	writeMapDiff(&diff, "annotation", live.Annotations, st.Annotations)
	r := nsRead{Observation: providers.Present, Outputs: namespaceOutputs(st)}
	if diff.Len() > 0 {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("namespace %s was changed outside migrate:\n%s", st.Name, strings.TrimRight(diff.String(), "\n"))
	}
	if prior == nil {
		// Adopted on resume: not known to be ours, so never deleted.
		r.Revert = namespaceRevertOf(namespaceRevert{Name: st.Name})
	}
	return r
}

func revertNamespace(ctx context.Context, c *call, a nsAttrs, u sdk.Applied[namespaceRevert]) phases.Diagnostics {
	inv := u.Data
	inv.Name = kept(inv.Name, a.Name, c.Addr.Name)
	if inv.Name == "" {
		return phases.Errorf("Invalid Revert", "The recorded revert data of %s names no namespace.", c.Addr)
	}
	p := c.Settings
	cl, diags := p.cluster(ctx, c, a.Kubeconfig)
	if diags.HasErrors() {
		return diags
	}
	nsc := cl.client.CoreV1().Namespaces()
	if inv.Delete {
		err := nsc.Delete(ctx, inv.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return phases.Errorf("Cannot Delete Namespace", "Deleting namespace %s for %s: %v.", inv.Name, c.Addr, err)
		}
		c.Log.Printf("deleted namespace %s", inv.Name)
		p.forgetLevel(inv.Name)
		return nil
	}
	if len(inv.Labels)+len(inv.Annotations) == 0 {
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live, err := nsc.Get(ctx, inv.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		restore(&live.Labels, inv.Labels)
		restore(&live.Annotations, inv.Annotations)
		_, err = nsc.Update(ctx, live, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		c.Log.Printf("namespace %s no longer exists: nothing to restore", inv.Name)
		return nil
	}
	if err != nil {
		return phases.Errorf("Cannot Restore Namespace", "Restoring namespace %s for %s: %v.", inv.Name, c.Addr, err)
	}
	p.forgetLevel(inv.Name)
	c.Log.Printf("restored the labels and annotations of namespace %s", inv.Name)
	return nil
}

func restore(m *map[string]string, prev map[string]*string) {
	if *m == nil {
		*m = map[string]string{}
	}
	for k, v := range prev {
		if v == nil {
			delete(*m, k)
		} else {
			(*m)[k] = *v
		}
	}
}

// waitGone waits until a namespace being deleted is gone.
func waitGone(ctx context.Context, cl *cluster, name string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		_, err := cl.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s is still being deleted: %w", name, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
