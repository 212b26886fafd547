package helm

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"sync"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm/scheduling"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret"
)

// TypeName is the provider type (and the name its plugin program serves);
// helmschema.TypeName is the same for migrate.
const TypeName = "helm"

// block is the provider block.
type block struct {
	Kubeconfig         string  `cty:"kubeconfig" doc:"Path to the kubeconfig, relative to the runbook; read at first use, so an earlier talos_kubeconfig step may write it. Default $KUBECONFIG or ~/.kube/config."`
	Context            string  `cty:"context" doc:"The kubeconfig context; default its current context."`
	DefaultPodSecurity *string `cty:"default_pod_security" doc:"The PodSecurity level the cluster enforces on unlabelled namespaces: \"baseline\" (default, as Talos enforces), \"restricted\" or \"privileged\"."`
}

// Provider installs Helm releases and the namespaces they run in. It is
// safe for concurrent use once configured. The SDK does the envelope of
// every call; the provider itself is the settings its handlers get.
type Provider struct {
	*sdk.Provider[*Provider]

	// The provider block. The kubeconfig is only a path here: it is read
	// at first use, since an earlier step of the same run
	// (talos_kubeconfig) may write it.
	dir         string
	kubeconfig  string // absolute, or "" for the clientcmd loading rules
	contextName string
	defaultPSS  string // the cluster-wide enforce level

	clusters clusters
	// pulls keeps the OCI charts pulled, by digest.
	pulls pulls

	// levels remembers the PodSecurity level each namespace WILL have, as
	// its kubernetes_namespace step says (from Plan, Apply and Read), so
	// that a later helm_release of the same run is checked against it.
	mu     sync.Mutex
	levels map[string]string
	// expected remembers, by kubeconfig file, the node a kubernetes_ready
	// step says its cluster will have (node_spec, node_capacity): the pods
	// of later steps are judged against it while the cluster does not
	// answer yet.
	expected map[string]scheduling.Node

	// hmacKey keys the fingerprints of Secret values in manifest diffs:
	// comparable within a run, useless for guessing the value.
	hmacKey []byte
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// New returns an unconfigured Helm provider.
func New() *Provider {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	p := &Provider{levels: map[string]string{}, hmacKey: key}
	p.Provider = &sdk.Provider[*Provider]{
		Name:          TypeName,
		Settings:      block{},
		ConfigureFunc: p.configure,
		CloseFunc:     p.close,
		Steps:         []sdk.Step[*Provider]{namespaceStep, releaseStep, readyStep, manifestStep, secretStep, jobStep},
		Scrub:         func(*Provider) *secret.Scrubber { return &secret.Scrubber{Min: minSecret} },
	}
	return p
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

// call is what every handler of the provider gets.
type call = sdk.Call[*Provider]

// minSecret is the shortest string worth scrubbing: shorter ones appear in
// text by chance.
const minSecret = 4

// configure reads the provider block; it connects to nothing yet.
func (p *Provider) configure(_ context.Context, req providers.ConfigureRequest) (*Provider, phases.Diagnostics) {
	var b block
	if d := sdk.Decode(req, &b, nil); d.HasErrors() {
		return p, d
	}
	p.dir = req.Dir
	if p.dir != "" {
		if abs, err := filepath.Abs(p.dir); err == nil {
			p.dir = abs
		}
	}
	p.kubeconfig, p.contextName, p.defaultPSS = p.abs(b.Kubeconfig), b.Context, levelBaseline
	if b.DefaultPodSecurity != nil {
		p.defaultPSS = *b.DefaultPodSecurity
	}
	if !validLevel(p.defaultPSS) {
		return p, phases.Errorf("Invalid PodSecurity Level", "default_pod_security of provider helm %q must be \"privileged\", \"baseline\" or \"restricted\", not %q.", req.Name, p.defaultPSS)
	}
	return p, nil
}

// abs resolves a path against the runbook directory.
func (p *Provider) abs(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(p.dir, path)
}

// close forgets the cached clusters.
func (p *Provider) close() error {
	p.clusters.mu.Lock()
	p.clusters.m = nil
	p.clusters.mu.Unlock()
	return nil
}

// cluster returns the cluster of a step, its API server dialled first
// (reach.go): its own kubeconfig attribute (kubeconfig), else the
// provider's. A path not known yet is a kubeconfig an earlier step writes.
func (p *Provider) cluster(ctx context.Context, c *call, kubeconfig string) (*cluster, phases.Diagnostics) {
	cl, diags := p.clusterOf(c, kubeconfig)
	if cl == nil {
		return nil, diags
	}
	if d := cl.reachable(ctx, c.Addr); d.HasErrors() {
		return nil, d
	}
	return cl, nil
}

// clusterOf is cluster without the dial, for kubernetes_ready, which
// waits for a server that may not answer yet.
func (p *Provider) clusterOf(c *call, kubeconfig string) (*cluster, phases.Diagnostics) {
	if c.Unknown("kubeconfig") {
		return nil, phases.Errorf("Cannot Use Kubeconfig", "%s cannot reach Kubernetes: %v: its path is not known yet.", c.Addr, errNoKubeconfig)
	}
	path := p.kubeconfig
	if kubeconfig != "" {
		path = p.abs(kubeconfig)
	}
	cl, err := p.clusters.get(path, p.contextName)
	if err != nil {
		return nil, phases.Errorf("Cannot Use Kubeconfig", "%s cannot reach Kubernetes: %v.", c.Addr, err)
	}
	return cl, nil
}

func (p *Provider) setLevel(ns, level string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.levels[ns] = level
}

func (p *Provider) forgetLevel(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.levels, ns)
}

func (p *Provider) level(ns string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.levels[ns]
	return l, ok
}

// known reports whether every attribute named is wholly known.
func known(c *call, names ...string) bool {
	for _, n := range names {
		if c.Unknown(n) {
			return false
		}
	}
	return true
}

// kept is a name of the revert data, or the configuration's (else def)
// where the SDK redacted it: the data keeps a secret's place, not the
// secret, and a name marked sensitive is taken from the step again.
func kept(recorded, configured, def string) string {
	switch {
	case !strings.Contains(recorded, phases.Redacted):
		return recorded
	case configured != "":
		return configured
	}
	return def
}
