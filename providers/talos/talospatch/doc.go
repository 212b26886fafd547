// Package talospatch rewrites a Talos machine-config patch for a release
// whose version contract moved some v1alpha1 fields into typed documents:
// since Talos 1.14, for instance, machine.kubelet is a KubeletConfig
// document and a patch that still sets it conflicts with the one the
// release's base config carries ("kubelet config is already set in
// v1alpha1 config"). The provider's plan shows the rewrite as a diff
// (package talos), `migrate patches upgrade` writes it, and `migrate init`
// writes the example's patches through it.
//
//	r, err := talospatch.Upgrade(data, "v1.14.7")
//	if r.Changed() { fmt.Print(r.Diff("patches/node.yaml")) }
//
// The moved fields are decoded with machinery's v1alpha1 types and the
// new documents are machinery's own (HostnameConfig, KubeNodeConfig,
// KubeletConfig, UnattendedInstallConfig, ResolverConfig,
// KubeAPIServerConfig, KubeProxyConfig, KubeCoreDNSConfig), encoded by
// machinery's encoder; the rest of the patch (its other documents, keys
// and comments) is kept as written. Rules lists what is covered; a field
// the release rejects that no rule covers is reported in Result.Left with
// what to do, never dropped.
package talospatch
