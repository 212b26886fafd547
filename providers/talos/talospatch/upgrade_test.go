package talospatch_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"

	"github.com/homelab-migrate/migrate/providers/talos/talospatch"
)

type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

// testBundle is made once: its keys take seconds on a busy machine.
var testBundle = sync.OnceValues(func() (*secrets.Bundle, error) {
	return secrets.NewBundle(secrets.NewFixedClock(time.Unix(1_700_000_000, 0)), coreconfig.TalosVersion1_13)
})

// render renders a control plane's config for a release with patches and
// validates it as a metal node does (strictly), as the provider does.
func render(t *testing.T, version string, patches ...[]byte) (coreconfig.Provider, error) {
	t.Helper()
	contract, err := coreconfig.ParseContractFromVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := testBundle()
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("home", "https://10.0.0.2:6443", "1.36.1",
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract),
		generate.WithInstallDisk("/dev/vda"), generate.WithInstallImage("factory.talos.dev/metal-installer/x:"+version))
	if err != nil {
		t.Fatal(err)
	}
	base, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	var ps []configpatcher.Patch
	for _, p := range patches {
		lp, err := configpatcher.LoadPatch(p)
		if err != nil {
			return nil, err
		}
		ps = append(ps, lp)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(base), ps)
	if err != nil {
		return nil, err
	}
	cfg, err := out.Config()
	if err != nil {
		return nil, err
	}
	_, err = cfg.Validate(metal{}, validation.WithStrict())
	return cfg, err
}

// Each covered field: the 1.13 patch is refused by the 1.14 contract, its
// rewrite validates and the node's config says what the old patch said.
func TestUpgradeFieldsFor114(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, patch, into string
		check             func(coreconfig.Provider) string
		want              string
	}{
		{"hostname", "machine:\n  network:\n    hostname: talos-home\n", "HostnameConfig", func(c coreconfig.Provider) string {
			return c.NetworkHostnameConfig().Hostname()
		}, "talos-home"},
		{"scheduling", "cluster:\n  allowSchedulingOnControlPlanes: true\n", "KubeNodeConfig", func(c coreconfig.Provider) string {
			return strings.Join(slices.Sorted(maps.Keys(c.K8sNodeConfig().Taints())), ",")
		}, ""},
		{"node labels", "machine:\n  nodeLabels:\n    zone: attic\n", "KubeNodeConfig", func(c coreconfig.Provider) string {
			return c.K8sNodeConfig().Labels()["zone"]
		}, "attic"},
		{"node taints", "machine:\n  nodeTaints:\n    gpu: only:NoSchedule\n", "KubeNodeConfig", func(c coreconfig.Provider) string {
			return c.K8sNodeConfig().Taints()["gpu"]
		}, "only:NoSchedule"},
		{"node annotations", "machine:\n  nodeAnnotations:\n    owner: ana\n", "KubeNodeConfig", func(c coreconfig.Provider) string {
			return c.K8sNodeConfig().Annotations()["owner"]
		}, "ana"},
		{"kubelet", "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"250\"\n    nodeIP:\n      validSubnets: [192.168.1.0/24]\n", "KubeletConfig", func(c coreconfig.Provider) string {
			return strings.Join(c.K8sKubeletConfig().ExtraArgs()["max-pods"], "") + " " + strings.Join(c.K8sNodeConfig().NodeIP().ValidSubnets(), ",")
		}, "250 192.168.1.0/24"},
		{"install", "machine:\n  install:\n    disk: /dev/sda\n    image: ghcr.io/siderolabs/installer:v1.14.1\n    wipe: true\n", "UnattendedInstallConfig", func(c coreconfig.Provider) string {
			u := c.UnattendedInstallConfig()
			return fmt.Sprint(u.InstallerImage(), " ", u.VolumeSelector().String(), " ", u.VolumeWipe())
		}, `ghcr.io/siderolabs/installer:v1.14.1 disk.dev_path == "/dev/sda" true`},
		{"nameservers", "machine:\n  network:\n    nameservers: [192.168.1.1]\n    searchDomains: [home.arpa]\n", "ResolverConfig", func(c coreconfig.Provider) string {
			r := c.NetworkResolverConfig()
			var s []string
			for _, n := range r.Resolvers() {
				s = append(s, n.Addr.String())
			}
			d, _ := r.SearchDomains().Get()
			return strings.Join(s, ",") + " " + strings.Join(d, ",")
		}, "192.168.1.1 home.arpa"},
		{"host dns", "machine:\n  features:\n    hostDNS:\n      enabled: true\n      forwardKubeDNSToHost: false\n", "ResolverConfig", nil, ""},
		{"api server", "cluster:\n  apiServer:\n    certSANs: [home.example.org]\n    extraArgs:\n      feature-gates: X=true\n", "KubeAPIServerConfig", func(c coreconfig.Provider) string {
			return strings.Join(c.K8sAPIServerConfig().CertSANs(), ",") + " " + strings.Join(c.K8sAPIServerConfig().ExtraArgs()["feature-gates"], "")
		}, "home.example.org X=true"},
		{"cni none", "cluster:\n  network:\n    cni:\n      name: none\n    podSubnets: [10.42.0.0/16]\n", "KubeNetworkConfig", func(c coreconfig.Provider) string {
			return fmt.Sprint(c.K8sNetworkConfig().PodCIDRs(), " flannel:", c.K8sFlannelCNIConfig() != nil)
		}, "[10.42.0.0/16] flannel:false"},
		{"cni none alone", "cluster:\n  network:\n    cni:\n      name: none\n", "KubeFlannelCNIConfig (deleted)", func(c coreconfig.Provider) string {
			return fmt.Sprint("flannel:", c.K8sFlannelCNIConfig() != nil)
		}, "flannel:false"},
		{"proxy", "cluster:\n  proxy:\n    disabled: true\n", "KubeProxyConfig", func(c coreconfig.Provider) string {
			return fmt.Sprint(c.K8sProxyConfig().Enabled())
		}, "false"},
		{"coredns", "cluster:\n  coreDNS:\n    disabled: true\n", "KubeCoreDNSConfig", func(c coreconfig.Provider) string {
			return fmt.Sprint(c.K8sCoreDNSConfig().Enabled())
		}, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := render(t, "v1.14.1", []byte(tc.patch)); err == nil {
				t.Fatalf("the 1.13 patch validates for 1.14: nothing to rewrite")
			}
			r, err := talospatch.Upgrade([]byte(tc.patch), "v1.14.1")
			if err != nil {
				t.Fatal(err)
			}
			if !r.Changed() || r.Moved[0].Into != tc.into || r.Moved[0].Line == 0 {
				t.Fatalf("moved = %+v, want into %s", r.Moved, tc.into)
			}
			if len(r.Left) > 0 {
				t.Errorf("left = %+v", r.Left)
			}
			cfg, err := render(t, "v1.14.1", r.New)
			if err != nil {
				t.Fatalf("the rewrite does not validate: %v\n%s", err, r.New)
			}
			if tc.check != nil {
				if got := tc.check(cfg); got != tc.want {
					t.Errorf("the config rendered with the rewrite says %q, want %q\n%s", got, tc.want, r.New)
				}
			}
		})
	}
}

// The example's patches: rewritten for 1.14, the scheduling key becomes a
// deletion of the base's control-plane taint and the comment above it is
// kept; nothing else changes.
func TestUpgradeHomelabPatches(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"node.yaml", "rehearsal.yaml"} {
		data, err := os.ReadFile("../../../examples/homelab/patches/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := render(t, "v1.14.1", data); err == nil || !strings.Contains(err.Error(), "allowSchedulingOnControlPlanes") {
			t.Fatalf("%s for 1.14: %v, want the scheduling key refused", name, err)
		}
		r, err := talospatch.Upgrade(data, "v1.14.7")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := render(t, "v1.14.1", r.New)
		if err != nil {
			t.Fatalf("%s rewritten: %v\n%s", name, err, r.New)
		}
		if taints := cfg.K8sNodeConfig().Taints(); len(taints) != 0 {
			t.Errorf("%s rewritten keeps taints %v", name, taints)
		}
		diff := r.Diff("patches/" + name)
		for _, want := range []string{"-cluster:", "-  allowSchedulingOnControlPlanes: true", "+kind: KubeNodeConfig", "+    $patch: delete", "(Talos v1.14.7)"} {
			if !strings.Contains(diff, want) {
				t.Errorf("the diff of %s lacks %q:\n%s", name, want, diff)
			}
		}
		if !bytes.Contains(r.New, []byte("no pod would ever schedule")) || !bytes.Contains(r.New, []byte("kind: HostnameConfig")) {
			t.Errorf("%s rewritten lost its comment or a document:\n%s", name, r.New)
		}
		again, err := talospatch.Upgrade(r.New, "v1.14.7")
		if err != nil || again.Changed() {
			t.Errorf("the rewrite is rewritten again: %v %+v", err, again)
		}
	}
}

// For 1.13 only what 1.13 rejects moves: the hostname (HostnameConfig
// since 1.12), not the Kubernetes keys.
func TestUpgradeFor113MovesOnlyWhat113Rejects(t *testing.T) {
	t.Parallel()
	patch := "machine:\n  network:\n    hostname: a\n  nodeLabels:\n    x: y\ncluster:\n  allowSchedulingOnControlPlanes: true\n"
	r, err := talospatch.Upgrade([]byte(patch), "v1.13.3")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Moved) != 1 || r.Moved[0].Field != "machine.network.hostname" {
		t.Fatalf("moved %+v, want the hostname only", r.Moved)
	}
	if _, err := render(t, "v1.13.3", r.New); err != nil {
		t.Fatalf("the rewrite for 1.13 does not validate: %v\n%s", err, r.New)
	}
}

// What no rule covers stays in the patch, named with its line and what to
// do; what the release accepts is not touched.
func TestUpgradeLeavesWhatItCannotMove(t *testing.T) {
	t.Parallel()
	patch := "machine:\n  env:\n    HTTP_PROXY: http://proxy:3128\n  install:\n    disk: /dev/sda\n    extraKernelArgs: [i915.enable_guc=3]\ncluster:\n  network:\n    cni:\n      name: custom\n      urls: [https://example.org/cilium.yaml]\n"
	r, err := talospatch.Upgrade([]byte(patch), "v1.14.1")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range r.Left {
		left = append(left, l.Field+":"+string(rune('0'+l.Line)))
	}
	if got := strings.Join(left, " "); got != "machine.install.extraKernelArgs:6 cluster.network.cni:9" {
		t.Errorf("left = %s (%+v)", got, r.Left)
	}
	for _, want := range []string{"HTTP_PROXY", "extraKernelArgs", "cni:", "kind: UnattendedInstallConfig", `disk.dev_path == "/dev/sda"`} {
		if !bytes.Contains(r.New, []byte(want)) {
			t.Errorf("the rewrite lacks %q:\n%s", want, r.New)
		}
	}
	same, err := talospatch.Upgrade([]byte("machine:\n  env:\n    A: b\n"), "v1.14.1")
	if err != nil || same.Changed() || !bytes.Equal(same.New, same.Old) {
		t.Errorf("a patch 1.14 accepts was rewritten: %v %+v", err, same)
	}
}

// A moved key may hold an anchor that a key staying refers to: the alias
// is replaced by what it named, so that the rewrite is YAML.
func TestUpgradeKeepsWhatAnAliasNamed(t *testing.T) {
	t.Parallel()
	r, err := talospatch.Upgrade([]byte("machine:\n  nodeLabels: &l\n    HTTP_PROXY: x\n  env: *l\n"), "v1.14.1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(r.New, []byte("env:\n    HTTP_PROXY: x")) || bytes.Contains(r.New, []byte("*l")) {
		t.Errorf("the rewrite lost what the alias named:\n%s", r.New)
	}
	if _, err := talospatch.Upgrade(r.New, "v1.14.1"); err != nil {
		t.Errorf("the rewrite is not YAML: %v\n%s", err, r.New)
	}
}

func TestUpgradeRefusesWhatIsNotAPatch(t *testing.T) {
	t.Parallel()
	if _, err := talospatch.Upgrade([]byte("machine: [\n"), "v1.14.1"); err == nil {
		t.Error("broken YAML was rewritten")
	}
	if _, err := talospatch.Upgrade([]byte("machine: {}\n"), "latest"); err == nil {
		t.Error("a version that is none was taken")
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := 'b', 'a'; i <= 'k'; i, prev = i+1, i {
		laughs += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", i, i, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	if _, err := talospatch.Upgrade([]byte(laughs+"machine: {}\n"), "v1.14.1"); err == nil || !strings.Contains(err.Error(), "aliases expand") {
		t.Errorf("billion laughs: %v", err)
	}
	r, err := talospatch.Upgrade([]byte("- op: add\n  path: /machine/network/hostname\n  value: a\n"), "v1.14.1")
	if err != nil || r.Changed() {
		t.Errorf("a JSON patch was rewritten: %v %+v", err, r)
	}
}

// FuzzUpgrade: any input either fails with an error or gives a patch that
// is YAML again and that a second rewrite leaves alone.
func FuzzUpgrade(f *testing.F) {
	for _, name := range []string{"node.yaml", "rehearsal.yaml"} {
		if b, err := os.ReadFile("../../../examples/homelab/patches/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("machine:\n  kubelet:\n    extraArgs:\n      a: b\n    extraMounts: [{destination: /a}]\n  install:\n    disk: /dev/sda\n"))
	f.Add([]byte("machine:\n  network:\n    hostname: [a]\n    nameservers: [x]\n"))
	f.Add([]byte("cluster:\n  apiServer:\n    certSANs: [a]\n    admissionControl: []\n  proxy: {disabled: true}\n"))
	f.Add([]byte("---\n---\nmachine: ~\n"))
	f.Add([]byte("machine:\n  nodeLabels: &l\n    a: b\n  env: *l\n"))
	f.Add([]byte("a: &a [x, x]\nb: &b [*a, *a]\nmachine:\n  network: &n\n    hostname: a\ncluster:\n  n: *n\n  c: [*b, *b]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := talospatch.Upgrade(data, "v1.14.1")
		if err != nil {
			return
		}
		again, err := talospatch.Upgrade(r.New, "v1.14.1")
		if err != nil {
			t.Fatalf("the rewrite is not YAML: %v\n%s", err, r.New)
		}
		if again.Changed() {
			t.Fatalf("a second rewrite moved %+v\nfirst:\n%s", again.Moved, r.New)
		}
	})
}
