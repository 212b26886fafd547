package helm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// cluster is one kubeconfig (path and context) made ready for use: the
// REST config, a clientset, and the discovery data and REST mapper cached
// in memory, shared by every call of the provider.
type cluster struct {
	key string
	// server, kubeconfig and context say which cluster it is, for
	// messages: the API server's URL, the file ("" for the loading
	// rules) and the context used.
	server, kubeconfig, context string
	reach                       sdk.Reach
	loader                      clientcmd.ClientConfig
	rest                        *rest.Config
	client                      kubernetes.Interface
	disc                        discovery.CachedDiscoveryInterface
	mapper                      meta.RESTMapper
}

// clusterKey identifies a kubeconfig by path, context and modification
// time: a file rewritten by a talos_kubeconfig step is read again.
type clusterKey struct {
	path, context string
	mtime         time.Time
	size          int64
}

// clusters caches the clusters of a provider instance.
type clusters struct {
	mu sync.Mutex
	m  map[clusterKey]*cluster
}

// errNoKubeconfig says the kubeconfig file does not exist (yet).
var errNoKubeconfig = errors.New("no kubeconfig")

// get returns the cluster of a kubeconfig path ("" for the usual
// KUBECONFIG and ~/.kube/config rules) and context, reading the file now.
func (cs *clusters) get(path, context string) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	k := clusterKey{path: path, context: context}
	if path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("%w: the kubeconfig %s does not exist", errNoKubeconfig, path)
			}
			return nil, err
		}
		k.mtime, k.size = fi.ModTime(), fi.Size()
		rules.ExplicitPath = path
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.m[k]; c != nil {
		return c, nil
	}
	overrides := &clientcmd.ConfigOverrides{}
	if context != "" {
		overrides.CurrentContext = context
	}
	loader, err := loaderOf(path, rules, overrides)
	if err != nil {
		return nil, err
	}
	rc, err := loader.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("%w: no kubeconfig found (set kubeconfig in the provider block or the step, or KUBECONFIG)", errNoKubeconfig)
		}
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 100, 200
	rc.WarningHandler = rest.NoWarnings{}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	disc := memory.NewMemCacheClient(client.Discovery())
	used := overrides.CurrentContext
	if raw, err := loader.RawConfig(); err == nil && used == "" {
		used = raw.CurrentContext
	}
	c := &cluster{
		key:        fmt.Sprintf("%s#%s", path, context),
		server:     rc.Host,
		kubeconfig: path,
		context:    used,
		loader:     loader,
		rest:       rc,
		client:     client,
		disc:       disc,
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(disc),
	}
	if cs.m == nil {
		cs.m = map[clusterKey]*cluster{}
	}
	cs.m[k] = c
	return c, nil
}

// loaderOf is the client config of a kubeconfig: read by client-go's
// loading rules, or, when the file is age-encrypted (talos_kubeconfig
// writes it so), decrypted in memory with MIGRATE_AGE_IDENTITY: the
// cluster's admin key never lies in clear on disk.
func loaderOf(path string, rules *clientcmd.ClientConfigLoadingRules, overrides *clientcmd.ConfigOverrides) (clientcmd.ClientConfig, error) {
	if path == "" {
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !agefile.IsEncrypted(b) {
		if strings.HasSuffix(path, agefile.Ext) {
			return nil, fmt.Errorf("the kubeconfig %s is named %s but is not age-encrypted: encrypt it (migrate secrets encrypt) or rename it", path, agefile.Ext)
		}
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides), nil
	}
	ids, err := agefile.Identities("")
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig %s is age-encrypted: %w", path, err)
	}
	plain, err := agefile.Decrypt(b, ids...)
	if err != nil {
		return nil, fmt.Errorf("decrypting the kubeconfig %s: %w", path, err)
	}
	cfg, err := clientcmd.Load(plain)
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig %s: %w", path, err)
	}
	return clientcmd.NewNonInteractiveClientConfig(*cfg, overrides.CurrentContext, overrides, rules), nil
}

// getter is the cluster as Helm's genericclioptions.RESTClientGetter, with
// a default namespace.
type getter struct {
	c  *cluster
	ns string
}

var _ genericclioptions.RESTClientGetter = getter{}

func (g getter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.c.rest), nil }
func (g getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.c.disc, nil
}
func (g getter) ToRESTMapper() (meta.RESTMapper, error)        { return g.c.mapper, nil }
func (g getter) ToRawKubeConfigLoader() clientcmd.ClientConfig { return nsLoader{g.c.loader, g.ns} }

// nsLoader is a ClientConfig whose namespace is the release's.
type nsLoader struct {
	base clientcmd.ClientConfig
	ns   string
}

func (l nsLoader) RawConfig() (clientcmdapi.Config, error) { return l.base.RawConfig() }
func (l nsLoader) ClientConfig() (*rest.Config, error)     { return l.base.ClientConfig() }
func (l nsLoader) Namespace() (string, bool, error)        { return l.ns, true, nil }
func (l nsLoader) ConfigAccess() clientcmd.ConfigAccess    { return l.base.ConfigAccess() }

// helmConfig is an action.Configuration for a namespace, with release
// records stored as Secrets in that namespace (Helm's default driver, so
// that helm list and helm history see them).
func (c *cluster) helmConfig(ns string, log func(string, ...any)) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	if log == nil {
		log = func(string, ...any) {}
	}
	if err := cfg.Init(getter{c, ns}, ns, "secret", log); err != nil {
		return nil, err
	}
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		kc.Namespace = ns
	}
	return cfg, nil
}
