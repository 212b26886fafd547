package talospatch

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"gopkg.in/yaml.v3"
)

// docs are the typed documents a patch's moved keys become, one of each
// kind, made when a key needs it.
type docs struct {
	hostname  *network.HostnameConfigV1Alpha1
	node      *k8s.KubeNodeConfigV1Alpha1
	untaint   bool // delete the control-plane taint of the base's KubeNodeConfig
	kubelet   *k8s.KubeletConfigV1Alpha1
	install   *runtime.UnattendedInstallConfigV1Alpha1
	resolver  *network.ResolverConfigV1Alpha1
	apiServer *k8s.KubeAPIServerConfigV1Alpha1
	proxy     *k8s.KubeProxyConfigV1Alpha1
	coreDNS   *k8s.KubeCoreDNSConfigV1Alpha1
	network   *k8s.KubeNetworkConfigV1Alpha1
	noFlannel bool // delete the base's KubeFlannelCNIConfig (cni: none)
	comments  []string
}

func (d *docs) comment(cs ...string) {
	for _, c := range cs {
		if c = strings.TrimSpace(c); c != "" {
			d.comments = append(d.comments, c)
		}
	}
}

func (d *docs) nodeConfig() *k8s.KubeNodeConfigV1Alpha1 {
	if d.node == nil {
		d.node = k8s.NewKubeNodeConfigV1Alpha1()
	}
	return d.node
}

func (d *docs) kubeletConfig() *k8s.KubeletConfigV1Alpha1 {
	if d.kubelet == nil {
		d.kubelet = k8s.NewKubeletConfigV1Alpha1()
	}
	return d.kubelet
}

func (d *docs) resolverConfig() *network.ResolverConfigV1Alpha1 {
	if d.resolver == nil {
		d.resolver = network.NewResolverConfigV1Alpha1()
	}
	return d.resolver
}

// nodes encodes the documents with machinery's encoder, in a fixed
// order, the moved keys' comments above the first.
func (d *docs) nodes() ([]*yaml.Node, error) {
	var list []config.Document
	for _, doc := range []config.Document{d.hostname, d.node, d.kubelet, d.install, d.resolver, d.apiServer, d.proxy, d.coreDNS, d.network} {
		if !isNil(doc) {
			list = append(list, doc)
		}
	}
	if d.untaint && d.node == nil {
		list = slices.Insert(list, 0, config.Document(k8s.NewKubeNodeConfigV1Alpha1()))
	}
	var out []*yaml.Node
	for _, doc := range list {
		b, err := encoder.NewEncoder(doc, encoder.WithComments(encoder.CommentsDisabled)).Encode()
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", doc.Kind(), err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(b, &n); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", doc.Kind(), err)
		}
		pruneZero(rootOf(&n))
		if doc.Kind() == k8s.KubeNodeConfig && d.untaint {
			deleteTaint(rootOf(&n), constants.LabelNodeRoleControlPlane)
		}
		out = append(out, &n)
	}
	if d.noFlannel {
		out = append(out, deleteDocument(k8s.KubeFlannelCNIConfig))
	}
	if len(out) > 0 && len(d.comments) > 0 {
		first := rootOf(out[0]).Content[0]
		first.HeadComment = strings.Join(d.comments, "\n")
	}
	return out, nil
}

// pruneZero removes the keys machinery's encoder writes for fields left
// unset ("image: \"\"", "config: {}"): a patch says only what it sets.
func pruneZero(m *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return
	}
	var keep []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		v := m.Content[i+1]
		pruneZero(v)
		empty := (v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode) && len(v.Content) == 0 ||
			v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == ""
		if !empty {
			keep = append(keep, m.Content[i], v)
		}
	}
	m.Content = keep
}

func isNil(doc config.Document) bool {
	switch v := doc.(type) {
	case *network.HostnameConfigV1Alpha1:
		return v == nil
	case *k8s.KubeNodeConfigV1Alpha1:
		return v == nil
	case *k8s.KubeletConfigV1Alpha1:
		return v == nil
	case *runtime.UnattendedInstallConfigV1Alpha1:
		return v == nil
	case *network.ResolverConfigV1Alpha1:
		return v == nil
	case *k8s.KubeAPIServerConfigV1Alpha1:
		return v == nil
	case *k8s.KubeProxyConfigV1Alpha1:
		return v == nil
	case *k8s.KubeCoreDNSConfigV1Alpha1:
		return v == nil
	case *k8s.KubeNetworkConfigV1Alpha1:
		return v == nil
	}
	return doc == nil
}

// deleteTaint adds a strategic-merge deletion of a taint (the base's
// control-plane taint), which no typed field can say.
func deleteTaint(root *yaml.Node, taint string) {
	_, taints := lookup(root, []string{"taints"})
	if taints == nil {
		taints = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		root.Content = append(root.Content, scalar("taints"), taints)
	}
	del := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{scalar("$patch"), scalar("delete")}}
	taints.Content = append(taints.Content, scalar(taint), del)
}

// deleteDocument is a patch document deleting the base's document of a
// kind (machinery's configloader takes $patch: delete on a document).
func deleteDocument(kind string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
		scalar("apiVersion"), scalar("v1alpha1"), scalar("kind"), scalar(kind), scalar("$patch"), scalar("delete"),
	}}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// moveHostname: machine.network.hostname is HostnameConfig's, with
// automatic hostnames off (as the static name was).
func moveHostname(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var name string
	if err := v.Decode(&name); err != nil {
		return "", nil, err
	}
	d.hostname = network.NewHostnameConfigV1Alpha1()
	d.hostname.ConfigAuto = new(nethelpers.AutoHostnameKindOff)
	d.hostname.ConfigHostname = name
	return network.HostnameKind, nil, nil
}

// moveScheduling: since 1.14 the control-plane taint is in the base's
// KubeNodeConfig; letting pods schedule there deletes it. false is the
// default (the taint stays): nothing to write.
func moveScheduling(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var allow bool
	if err := v.Decode(&allow); err != nil {
		return "", nil, err
	}
	d.untaint = d.untaint || allow
	return k8s.KubeNodeConfig, nil, nil
}

func moveNodeLabels(v *yaml.Node, d *docs) (string, map[string]string, error) {
	m, err := decodeMap(v)
	n := d.nodeConfig()
	n.LabelsConfig = merged(n.LabelsConfig, m)
	return k8s.KubeNodeConfig, nil, err
}

func moveNodeAnnotations(v *yaml.Node, d *docs) (string, map[string]string, error) {
	m, err := decodeMap(v)
	n := d.nodeConfig()
	n.AnnotationsConfig = merged(n.AnnotationsConfig, m)
	return k8s.KubeNodeConfig, nil, err
}

func moveNodeTaints(v *yaml.Node, d *docs) (string, map[string]string, error) {
	m, err := decodeMap(v)
	n := d.nodeConfig()
	n.TaintsConfig = merged(n.TaintsConfig, m)
	return k8s.KubeNodeConfig, nil, err
}

func decodeMap(v *yaml.Node) (map[string]string, error) {
	var m map[string]string
	err := v.Decode(&m)
	return m, err
}

func merged(a, b map[string]string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range b {
		a[k] = v
	}
	return a
}

// moveKubelet: machine.kubelet is KubeletConfig's, but for nodeIP,
// skipNodeRegistration and registerWithFQDN, which are KubeNodeConfig's.
func moveKubelet(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var k v1alpha1.KubeletConfig
	if err := v.Decode(&k); err != nil {
		return "", nil, err
	}
	left := map[string]string{}
	if len(k.KubeletExtraMounts) > 0 {
		left["extraMounts"] = "Talos 1.14's KubeletConfig has no extra mounts: mount a volume (UserVolumeConfig, ExternalVolumeConfig) under /var/mnt, which the kubelet sees"
	}
	if len(k.KubeletCredentialProviderConfig.Object) > 0 {
		left["credentialProviderConfig"] = "write a KubeCredentialProviderConfig document"
	}
	if k.KubeletDisableManifestsDirectory != nil {
		left["disableManifestsDirectory"] = "remove it: Talos 1.14 always disables the kubelet's manifests directory"
	}
	kc := k8s.NewKubeletConfigV1Alpha1()
	kc.KubeletImage = k.KubeletImage
	kc.KubeletArgs = k.KubeletExtraArgs
	kc.KubeletConfig = k.KubeletExtraConfig
	kc.KubeletClusterDNS = k.KubeletClusterDNS
	kc.KubeletDefaultRuntimeSeccompProfileEnabled = k.KubeletDefaultRuntimeSeccompProfileEnabled
	if kc.KubeletImage != "" || len(kc.KubeletArgs) > 0 || len(kc.KubeletConfig.Object) > 0 || len(kc.KubeletClusterDNS) > 0 || kc.KubeletDefaultRuntimeSeccompProfileEnabled != nil {
		d.kubelet = kc
	}
	if k.KubeletNodeIP != nil && len(k.KubeletNodeIP.KubeletNodeIPValidSubnets) > 0 {
		d.nodeConfig().NodeIPConfig.NodeIPValidSubnets = k.KubeletNodeIP.KubeletNodeIPValidSubnets
	}
	if k.KubeletSkipNodeRegistration != nil {
		d.nodeConfig().SkipNodeRegistrationConfig = k.KubeletSkipNodeRegistration
	}
	if k.KubeletRegisterWithFQDN != nil {
		d.nodeConfig().RegisterWithFQDNConfig = k.KubeletRegisterWithFQDN
	}
	return k8s.KubeletConfig, left, nil
}

// moveInstall: machine.install is UnattendedInstallConfig's: the disk by
// a CEL selector of its device path (as machinery's generate writes it),
// the installer image, wipe.
func moveInstall(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var in v1alpha1.InstallConfig
	if err := v.Decode(&in); err != nil {
		return "", nil, err
	}
	left := map[string]string{}
	if in.InstallDiskSelector != nil {
		left["diskSelector"] = "write provisioning.diskSelector.match in an UnattendedInstallConfig document as a CEL expression (disk.model, disk.size, disk.transport, system_disk)"
	}
	if len(in.InstallExtraKernelArgs) > 0 {
		left["extraKernelArgs"] = "put the arguments in the Image Factory schematic (customization.extraKernelArgs): Talos 1.14 boots the UKI's command line"
	}
	if in.InstallLegacyBIOSSupport != nil {
		left["legacyBIOSSupport"] = "remove it: UnattendedInstallConfig has no legacy BIOS switch"
	}
	if len(in.InstallExtensions) > 0 { //nolint:staticcheck // what a 1.13 patch may still say
		left["extensions"] = "put the extensions in the Image Factory schematic (the provider's extensions)"
	}
	u := runtime.NewUnattendedInstallConfigV1Alpha1()
	u.Installer.Image = in.InstallImage
	u.ProvisioningSpec.Wipe = in.InstallWipe
	if in.InstallDisk != "" {
		expr, err := cel.ParseBooleanExpression(fmt.Sprintf("disk.dev_path == %q", in.InstallDisk), celenv.DiskLocator())
		if err != nil {
			return "", nil, err
		}
		u.ProvisioningSpec.DiskSelector.Match = expr
	}
	if u.Installer.Image != "" || u.ProvisioningSpec.Wipe != nil || !u.ProvisioningSpec.DiskSelector.Match.IsZero() {
		d.install = u
	}
	return runtime.UnattendedInstallConfigKind, left, nil
}

func moveNameservers(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var ns []string
	if err := v.Decode(&ns); err != nil {
		return "", nil, err
	}
	r := d.resolverConfig()
	for _, s := range ns {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return "", nil, fmt.Errorf("nameserver %q: %w", s, err)
		}
		r.ResolverNameservers = append(r.ResolverNameservers, network.NameserverConfig{Address: meta.Addr{Addr: a}})
	}
	return network.ResolverKind, nil, nil
}

func moveSearchDomains(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var ds []string
	if err := v.Decode(&ds); err != nil {
		return "", nil, err
	}
	d.resolverConfig().ResolverSearchDomains.SearchDomains = ds
	return network.ResolverKind, nil, nil
}

func moveDisableSearchDomain(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var off bool
	if err := v.Decode(&off); err != nil {
		return "", nil, err
	}
	d.resolverConfig().ResolverSearchDomains.SearchDisableDefault = &off
	return network.ResolverKind, nil, nil
}

func moveHostDNS(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var h v1alpha1.HostDNSConfig
	if err := v.Decode(&h); err != nil {
		return "", nil, err
	}
	r := d.resolverConfig()
	r.ResolverHostDNS.HostDNSEnabled = h.HostDNSConfigEnabled
	r.ResolverHostDNS.HostDNSForwardKubeDNSToHost = h.HostDNSForwardKubeDNSToHost
	r.ResolverHostDNS.HostDNSResolveMemberNames = h.HostDNSResolveMemberNames
	return network.ResolverKind, nil, nil
}

// moveAPIServer: cluster.apiServer's image, extraArgs, env and certSANs
// are KubeAPIServerConfig's; its other keys are left with what to do.
func moveAPIServer(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var a v1alpha1.APIServerConfig
	if err := v.Decode(&a); err != nil {
		return "", nil, err
	}
	left := map[string]string{}
	for _, k := range keysOf(v) {
		switch k {
		case "image", "extraArgs", "env", "certSANs":
		default:
			left[k] = "move it into a KubeAPIServerConfig document (or KubeAdmissionControlConfig, KubeAuditPolicyConfig, KubeAuthorizerConfig) by hand: not rewritten yet"
		}
	}
	s := k8s.NewKubeAPIServerConfigV1Alpha1()
	s.PodImage = a.ContainerImage
	s.PodArgs = a.ExtraArgsConfig
	s.PodEnv = a.EnvConfig
	s.PodCertExtraSANs = a.ExtraCertSANs
	d.apiServer = s
	return k8s.KubeAPIServerConfig, left, nil
}

func moveProxy(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var p v1alpha1.ProxyConfig
	if err := v.Decode(&p); err != nil {
		return "", nil, err
	}
	s := k8s.NewKubeProxyConfigV1Alpha1()
	if p.Disabled != nil {
		s.ProxyEnabled = new(!*p.Disabled)
	}
	s.ProxyImage = p.ContainerImage
	s.ProxyMode = p.ModeConfig
	s.ProxyExtraArgs = p.ExtraArgsConfig
	d.proxy = s
	return k8s.KubeProxyConfig, nil, nil
}

func moveCoreDNS(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var c v1alpha1.CoreDNS
	if err := v.Decode(&c); err != nil {
		return "", nil, err
	}
	s := k8s.NewKubeCoreDNSConfigV1Alpha1()
	if c.CoreDNSDisabled != nil {
		s.PodEnabled = new(!*c.CoreDNSDisabled)
	}
	s.PodImage = c.CoreDNSImage
	d.coreDNS = s
	return k8s.KubeCoreDNSConfig, nil, nil
}

func keysOf(m *yaml.Node) []string {
	var ks []string
	if m.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(m.Content); i += 2 {
			ks = append(ks, m.Content[i].Value)
		}
	}
	return ks
}

// moveClusterNetwork: cluster.network's subnets and DNS domain are
// KubeNetworkConfig's; cni: none deletes the base's KubeFlannelCNIConfig
// (1.14 renders Flannel as that document); a custom CNI is left.
func moveClusterNetwork(v *yaml.Node, d *docs) (string, map[string]string, error) {
	var c v1alpha1.ClusterNetworkConfig
	if err := v.Decode(&c); err != nil {
		return "", nil, err
	}
	left := map[string]string{}
	for _, k := range keysOf(v) {
		switch k {
		case "dnsDomain", "podSubnets", "serviceSubnets", "cni":
		default:
			left[k] = "move it into the KubeNetworkConfig document by hand: not rewritten yet"
		}
	}
	if c.CNI != nil {
		switch {
		case c.CNI.CNIName == "none" && len(c.CNI.CNIUrls) == 0 && c.CNI.CNIFlannel == nil:
			d.noFlannel = true
		case c.CNI.CNIName == "flannel" && c.CNI.CNIFlannel == nil:
		default:
			left["cni"] = "write the CNI as Talos 1.14 does: a KubeFlannelCNIConfig document, or (custom) KubeExternalManifestConfig documents of its URLs and a document deleting KubeFlannelCNIConfig"
		}
	}
	n := k8s.NewKubeNetworkConfigV1Alpha1()
	n.NetworkDNSDomain = c.DNSDomain
	for _, list := range []struct {
		in  []string
		out *[]meta.Prefix
	}{{c.PodSubnet, &n.NetworkPodSubnets}, {c.ServiceSubnet, &n.NetworkServiceSubnets}} {
		for _, s := range list.in {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return "", nil, fmt.Errorf("subnet %q: %w", s, err)
			}
			*list.out = append(*list.out, meta.Prefix{Prefix: p})
		}
	}
	if n.NetworkDNSDomain != "" || len(n.NetworkPodSubnets) > 0 || len(n.NetworkServiceSubnets) > 0 {
		d.network = n
	}
	into := k8s.KubeNetworkConfig
	if d.network == nil && d.noFlannel {
		into = k8s.KubeFlannelCNIConfig + " (deleted)"
	}
	return into, left, nil
}
