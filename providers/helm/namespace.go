package helm

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
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

// namespaceStep is a decoded kubernetes_namespace step.
type namespaceStep struct {
	name        string
	labels      map[string]string // including the PodSecurity labels
	annotations map[string]string
	level       string
}

// decodeNamespace decodes the step; known is false when a value is not
// known yet.
func (c *call) decodeNamespace() (*namespaceStep, bool) {
	if !c.cfg.IsKnown() {
		return nil, false
	}
	st := &namespaceStep{}
	var k1, k2, k3, k4 bool
	st.name, k1 = c.str("name", c.addr.Name)
	st.labels, k2 = c.strMap("labels")
	st.annotations, k3 = c.strMap("annotations")
	st.level, k4 = c.str("pod_security", "")
	if st.labels == nil {
		st.labels = map[string]string{}
	}
	if st.annotations == nil {
		st.annotations = map[string]string{}
	}
	if k1 {
		if errs := validation.IsDNS1123Label(st.name); len(errs) > 0 {
			c.errorf("Invalid Namespace Name", "%q is not a valid namespace name for %s: %s.", st.name, c.what, strings.Join(errs, "; "))
		}
	}
	if k4 && st.level != "" {
		if !validLevel(st.level) {
			c.errorf("Invalid PodSecurity Level", "pod_security of %s must be \"privileged\", \"baseline\" or \"restricted\", not %q.", c.what, st.level)
		} else {
			for _, mode := range []string{"enforce", "audit", "warn"} {
				st.labels[labelPrefix+mode] = st.level
				st.labels[labelPrefix+mode+"-version"] = "latest"
			}
		}
	}
	return st, k1 && k2 && k3 && k4
}

// remember records the level the namespace will have for later releases.
func (p *Provider) remember(st *namespaceStep) {
	if st == nil || st.name == "" {
		return
	}
	if l := st.labels[labelEnforce]; validLevel(l) {
		p.setLevel(st.name, l)
	}
}

// namespaceInverse is a kubernetes_namespace step's inverse data.
type namespaceInverse struct {
	Name string `json:"name"`
	// Delete: this step created the namespace.
	Delete bool `json:"delete,omitempty"`
	// Labels and Annotations changed, with their previous values; a nil
	// value means the key did not exist.
	Labels      map[string]*string `json:"labels,omitempty"`
	Annotations map[string]*string `json:"annotations,omitempty"`
}

func (p *Provider) planNamespace(ctx context.Context, c *call, req providers.PlanRequest) providers.PlanResponse {
	st, known := c.decodeNamespace()
	if c.diags.HasErrors() {
		return providers.PlanResponse{}
	}
	if st == nil {
		return providers.PlanResponse{Diff: "namespace (known after earlier steps apply)\n"}
	}
	p.remember(st)
	var b strings.Builder
	if l := st.labels[labelEnforce]; l != "" {
		fmt.Fprintf(&b, "namespace %s: PodSecurity %s\n", st.name, l)
	}
	if !known {
		fmt.Fprintf(&b, "namespace %s: labels or annotations known after earlier steps apply\n", st.name)
		return providers.PlanResponse{Diff: b.String()}
	}
	cl, _, diags := p.cluster(c)
	if cl == nil {
		if diags.HasErrors() && !isNoKubeconfig(diags) {
			return providers.PlanResponse{Diagnostics: diags}
		}
		fmt.Fprintf(&b, "+ namespace %s (the cluster cannot be read yet: the kubeconfig is written by an earlier step)\n", st.name)
		writeMapDiff(&b, "label", nil, st.labels)
		writeMapDiff(&b, "annotation", nil, st.annotations)
		return providers.PlanResponse{Diff: b.String()}
	}
	live, err := cl.client.CoreV1().Namespaces().Get(ctx, st.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(&b, "+ namespace %s\n", st.name)
		writeMapDiff(&b, "label", nil, st.labels)
		writeMapDiff(&b, "annotation", nil, st.annotations)
	case err != nil:
		return providers.PlanResponse{Diagnostics: phases.Errorf("Cannot Read Namespace", "Reading namespace %s for %s: %v.", st.name, c.what, err)}
	default:
		n := b.Len()
		if live.DeletionTimestamp != nil {
			fmt.Fprintf(&b, "! namespace %s is being deleted; apply waits for it to go, then creates it\n", st.name)
		}
		writeMapDiff(&b, "label", live.Labels, st.labels)
		writeMapDiff(&b, "annotation", live.Annotations, st.annotations)
		if b.Len() == n {
			fmt.Fprintf(&b, "  namespace %s exists with these labels and annotations: no change\n", st.name)
		} else {
			s := b.String()
			b.Reset()
			b.WriteString(s[:n])
			fmt.Fprintf(&b, "~ namespace %s\n", st.name)
			b.WriteString(s[n:])
		}
	}
	return providers.PlanResponse{Diff: b.String()}
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
	for _, k := range sortedKeys(want) {
		old, ok := have[k]
		switch {
		case !ok:
			fmt.Fprintf(b, "  + %s %s = %q\n", what, k, want[k])
		case old != want[k]:
			fmt.Fprintf(b, "  ~ %s %s = %q -> %q\n", what, k, old, want[k])
		}
	}
}

func (p *Provider) applyNamespace(ctx context.Context, c *call, req providers.ApplyRequest) providers.ApplyResponse {
	st, known := c.decodeNamespace()
	if c.diags.HasErrors() {
		return providers.ApplyResponse{}
	}
	if !known {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Unknown Values", "%s has values that are not known at apply time.", c.what)}
	}
	p.remember(st)
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	nsc := cl.client.CoreV1().Namespaces()
	inv := namespaceInverse{Name: st.name}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inv = namespaceInverse{Name: st.name}
		live, err := nsc.Get(ctx, st.name, metav1.GetOptions{})
		if err == nil && live.DeletionTimestamp != nil {
			c.log.Printf("namespace %s is being deleted; waiting for it to go", st.name)
			if err := waitGone(ctx, cl, st.name, 2*time.Minute); err != nil {
				return err
			}
			live, err = nsc.Get(ctx, st.name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.name, Labels: st.labels, Annotations: st.annotations}}
			if _, err := nsc.Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				return err
			}
			inv.Delete = true
			c.log.Printf("created namespace %s", st.name)
			return nil
		}
		if err != nil {
			return err
		}
		inv.Labels = merge(&live.Labels, st.labels)
		inv.Annotations = merge(&live.Annotations, st.annotations)
		if len(inv.Labels)+len(inv.Annotations) == 0 {
			c.log.Printf("namespace %s is up to date", st.name)
			return nil
		}
		if _, err := nsc.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.log.Printf("updated namespace %s: %d label(s), %d annotation(s)", st.name, len(inv.Labels), len(inv.Annotations))
		return nil
	})
	if err != nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Apply Namespace", "Applying namespace %s for %s: %v.", st.name, c.what, err)}
	}
	inverse := namespaceInverseOf(inv)
	if prev := priorNamespaceInverse(req.Prior); prev != nil && prev.Name == st.name {
		// Applied again: undoing goes back to before the first apply.
		inverse = req.Prior.Inverse
	}
	return providers.ApplyResponse{Outputs: namespaceOutputs(st), Inverse: inverse}
}

func namespaceOutputs(st *namespaceStep) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"name":         cty.StringVal(st.name),
		"pod_security": cty.StringVal(st.labels[labelEnforce]),
	})
}

func namespaceInverseOf(inv namespaceInverse) *providers.Inverse {
	data, _ := json.Marshal(inv)
	desc := fmt.Sprintf("restore the labels and annotations of namespace %s", inv.Name)
	switch {
	case inv.Delete:
		desc = fmt.Sprintf("delete namespace %s (this step created it)", inv.Name)
	case len(inv.Labels)+len(inv.Annotations) == 0:
		desc = fmt.Sprintf("nothing: namespace %s already was as the step wants", inv.Name)
	}
	return &providers.Inverse{Description: desc, Data: data}
}

func priorNamespaceInverse(prior *providers.Prior) *namespaceInverse {
	if prior == nil || prior.Inverse == nil || len(prior.Inverse.Data) == 0 {
		return nil
	}
	var inv namespaceInverse
	if json.Unmarshal(prior.Inverse.Data, &inv) != nil {
		return nil
	}
	return &inv
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

func (p *Provider) readNamespace(ctx context.Context, c *call, req providers.ReadRequest) providers.ReadResponse {
	st, known := c.decodeNamespace()
	if c.diags.HasErrors() {
		return providers.ReadResponse{}
	}
	if st == nil || !known {
		return providers.ReadResponse{Observation: providers.Unknown}
	}
	p.remember(st)
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.ReadResponse{Diagnostics: diags}
	}
	live, err := cl.client.CoreV1().Namespaces().Get(ctx, st.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("namespace %s does not exist", st.name)}
	}
	if err != nil {
		return providers.ReadResponse{Diagnostics: phases.Errorf("Cannot Read Namespace", "Reading namespace %s for %s: %v.", st.name, c.what, err)}
	}
	if live.DeletionTimestamp != nil {
		return providers.ReadResponse{Observation: providers.Absent, Detail: fmt.Sprintf("namespace %s is being deleted", st.name)}
	}
	var diff strings.Builder
	writeMapDiff(&diff, "label", live.Labels, st.labels)
	writeMapDiff(&diff, "annotation", live.Annotations, st.annotations)
	r := providers.ReadResponse{Observation: providers.Present, Outputs: namespaceOutputs(st)}
	if diff.Len() > 0 {
		r.Observation = providers.Drifted
		r.Detail = fmt.Sprintf("namespace %s was changed outside migrate:\n%s", st.name, strings.TrimRight(diff.String(), "\n"))
	}
	if req.Prior == nil {
		// Adopted on resume: not known to be ours, so never deleted.
		r.Inverse = namespaceInverseOf(namespaceInverse{Name: st.name})
	}
	return r
}

func (p *Provider) revertNamespace(ctx context.Context, c *call, req providers.RevertRequest) providers.RevertResponse {
	var inv namespaceInverse
	if err := json.Unmarshal(req.Inverse.Data, &inv); err != nil || inv.Name == "" {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Invalid Inverse", "The recorded inverse of %s cannot be read: %v.", c.what, err)}
	}
	cl, _, diags := p.cluster(c)
	if diags.HasErrors() {
		return providers.RevertResponse{Diagnostics: diags}
	}
	nsc := cl.client.CoreV1().Namespaces()
	if inv.Delete {
		err := nsc.Delete(ctx, inv.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Delete Namespace", "Deleting namespace %s for %s: %v.", inv.Name, c.what, err)}
		}
		c.log.Printf("deleted namespace %s", inv.Name)
		p.mu.Lock()
		delete(p.levels, inv.Name)
		p.mu.Unlock()
		return providers.RevertResponse{}
	}
	if len(inv.Labels)+len(inv.Annotations) == 0 {
		return providers.RevertResponse{}
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
		c.log.Printf("namespace %s no longer exists: nothing to restore", inv.Name)
		return providers.RevertResponse{}
	}
	if err != nil {
		return providers.RevertResponse{Diagnostics: phases.Errorf("Cannot Restore Namespace", "Restoring namespace %s for %s: %v.", inv.Name, c.what, err)}
	}
	p.mu.Lock()
	delete(p.levels, inv.Name)
	p.mu.Unlock()
	c.log.Printf("restored the labels and annotations of namespace %s", inv.Name)
	return providers.RevertResponse{}
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
