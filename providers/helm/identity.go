package helm

import (
	"context"
	"time"

	"github.com/zclconf/go-cty/cty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/providers"
)

// Read is the SDK's, with the identity of the cluster the step is in:
// a cluster bootstrapped anew under the same address is another, and the
// records made in the one before are no proof about it.
func (p *Provider) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	r := p.Provider.Read(ctx, req)
	if r.Observation == providers.Present && !r.Diagnostics.HasErrors() {
		r.Identity = p.clusterIdentity(ctx, req.Config)
	}
	return r
}

// Apply is the SDK's, with the identity of the cluster (see Read).
func (p *Provider) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	r := p.Provider.Apply(ctx, req)
	if !r.Diagnostics.HasErrors() {
		r.Identity = p.clusterIdentity(ctx, req.Config)
	}
	return r
}

// clusterIdentity names the cluster of a step's configuration by the UID
// of its kube-system namespace, which the API server makes once, when
// the cluster's etcd is new. Empty when it cannot be read: nothing is
// compared then.
func (p *Provider) clusterIdentity(ctx context.Context, cfg cty.Value) string {
	path := p.kubeconfig
	cfg, _ = cfg.UnmarkDeep()
	if cfg.IsKnown() && !cfg.IsNull() && cfg.Type().IsObjectType() && cfg.Type().HasAttribute("kubeconfig") {
		v, _ := cfg.GetAttr("kubeconfig").Unmark()
		if !v.IsKnown() {
			return ""
		}
		if !v.IsNull() && v.AsString() != "" {
			path = p.abs(v.AsString())
		}
	}
	cl, err := p.clusters.get(path, p.contextName)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ns, err := cl.client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil || ns.UID == "" {
		return ""
	}
	return "cluster " + string(ns.UID) // not its address: a cluster moved to another is the same one
}
