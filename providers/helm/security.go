package helm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm/podsecurity"
)

// levelOf is the PodSecurity level a namespace will enforce, and why:
// its kubernetes_namespace step (planned, applied or read in this run),
// else the live namespace's enforce label, else the cluster default.
func (p *Provider) levelOf(ctx context.Context, cl *cluster, ns string) (level, why string) {
	if l, ok := p.level(ns); ok {
		return l, "set by its kubernetes_namespace step"
	}
	if ns == "kube-system" {
		return levelPrivileged, "exempt from PodSecurity, as Talos configures it"
	}
	if cl != nil {
		live, err := cl.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			if l := live.Labels[labelEnforce]; validLevel(l) {
				return l, "its label in the cluster"
			}
		} else if !apierrors.IsNotFound(err) {
			return p.defaultPSS, fmt.Sprintf("the cluster default (the namespace cannot be read: %v)", err)
		}
	}
	return p.defaultPSS, "the cluster default"
}

// preflight checks every pod template of the rendered objects against the
// level of its namespace, and, when planning, against the nodes that
// would run it (schedulingPreflight; at apply the cluster's own scheduler
// judges, and the wait names what stays Pending). It returns one line per namespace touched
// ("namespace media: PodSecurity privileged ...") and an error diagnostic
// per namespace with violations.
func (p *Provider) preflight(ctx context.Context, cl *cluster, st relAttrs, objs []*object, planning bool) ([]string, phases.Diagnostics) {
	byNS := map[string][]*object{st.Namespace: nil}
	for _, o := range objs {
		if o.Namespaced {
			byNS[o.Namespace] = append(byNS[o.Namespace], o)
		}
	}
	var lines []string
	var diags phases.Diagnostics
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		level, why := p.levelOf(ctx, cl, ns)
		lines = append(lines, fmt.Sprintf("namespace %s: PodSecurity %s (%s)", ns, level, why))
		if len(byNS[ns]) == 0 {
			continue
		}
		docs := make([]string, len(byNS[ns]))
		for i, o := range byNS[ns] {
			docs[i] = o.Raw
		}
		findings, err := podsecurity.Evaluate([]byte(strings.Join(docs, "\n---\n")), level, ns)
		if err != nil {
			diags = append(diags, phases.Errorf("PodSecurity Check Failed", "The pod templates of release %s in namespace %s cannot be checked: %v.", st.Name, ns, err)...)
			continue
		}
		if len(findings) > 0 {
			v := phases.Errorf("PodSecurity Violation", "%s", podsecurity.Message(st.Name, ns, level, findings))
			v[0].Definite = true // the rendered pods break the level whatever the cluster
			diags = append(diags, v...)
		}
	}
	if !planning {
		return lines, diags
	}
	var docs []string
	for _, o := range objs {
		docs = append(docs, o.Raw)
	}
	line, d := p.schedulingPreflight(ctx, cl, st.Kubeconfig, "release "+st.Name, st.Namespace, docs)
	return append(lines, line), append(diags, d...)
}
