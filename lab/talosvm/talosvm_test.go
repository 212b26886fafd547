package talosvm_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/lab/talosvm"
	"github.com/homelab-migrate/migrate/providers/talos"
)

var disks = []talosnode.Disk{
	{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK", Transport: "scsi"},
	{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK", Serial: "bulk", Transport: "scsi"},
}

// freeAddr picks a loopback address none of whose node ports is taken, so
// that tests (and other labs) run side by side.
func freeAddr(t *testing.T) string {
	t.Helper()

	for range 100 {
		addr := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 2+rand.IntN(250))
		free := true

		for _, port := range []int{talosvm.APIPort, 6443, 2379, 2380, 10250} { // 10250: the kubelet's (logs)
			l, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
			if err != nil {
				free = false

				break
			}

			l.Close() //nolint:errcheck
		}

		if free {
			return addr
		}
	}

	t.Fatal("no free loopback address")

	return ""
}

func boot(t *testing.T, spec talosvm.Spec) *talosvm.VM {
	t.Helper()

	spec.Addr = freeAddr(t)
	spec.Dir = t.TempDir()
	spec.Disks = disks
	spec.RebootDuration = 200 * time.Millisecond
	spec.Log = func(format string, args ...any) { t.Logf(format, args...) }

	vm, err := talosvm.Boot(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(vm.Stop)

	return vm
}

// install applies, in maintenance mode, a controlplane config for the VM
// (endpoint on its address, the given installer image) with the patch,
// as the talos provider's first install does, and returns an mTLS client.
func install(t *testing.T, ctx context.Context, vm *talosvm.VM, image string, patch []byte) *client.Client {
	t.Helper()

	host, _, _ := net.SplitHostPort(vm.Addr()) //nolint:errcheck

	in, err := talosnode.UserInput("homelab", generate.WithInstallDisk("/dev/sda"), generate.WithInstallImage(image))
	if err != nil {
		t.Fatal(err)
	}

	in.ControlPlaneEndpoint = talosvm.Endpoint(host)

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	p, err := configpatcher.LoadPatch(patch)
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}

	data, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	if c, err := configloader.NewFromBytes(data); err != nil || c.K8sClusterConfig().ClusterEndpoint().String() != talosvm.Endpoint(host) {
		t.Fatalf("patched config: %v", err)
	}

	insecure, err := client.New(ctx, client.WithEndpoints(vm.Addr()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}
	defer insecure.Close() //nolint:errcheck

	if _, err = insecure.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-vm.Node().Installed():
	case <-time.After(time.Minute):
		t.Fatal("the node did not come back installed")
	}

	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}

	tc.Contexts[tc.Context].Endpoints = []string{vm.Addr()}

	c, err := client.New(ctx, client.WithConfig(tc))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c
}

func read(ctx context.Context, c *client.Client, path string) (string, error) {
	r, err := c.Read(ctx, path)
	if err != nil {
		return "", err
	}
	defer r.Close() //nolint:errcheck

	b, err := io.ReadAll(r)

	return string(b), err
}

func dmesg(t *testing.T, ctx context.Context, c *client.Client) string {
	t.Helper()

	s, err := c.Dmesg(ctx, false, false)
	if err != nil {
		t.Fatal(err)
	}

	var b strings.Builder

	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return b.String()
		}

		if err != nil {
			t.Fatal(err)
		}

		b.Write(m.GetBytes())
	}
}

func homelabPatch(t *testing.T) []byte {
	t.Helper()

	b, err := os.ReadFile("../../examples/homelab/patches/node.yaml")
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// homelabHostname is the hostname the homelab patch's HostnameConfig
// sets: the name of the Node kwok registers.
func homelabHostname(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^hostname:\s*(\S+)`).FindSubmatch(homelabPatch(t))
	if m == nil {
		t.Fatal("the homelab patch sets no hostname")
	}
	return string(m[1])
}

var i915Image = talos.InstallerImage(talos.ExtensionsSchematicID("siderolabs/i915"), "v1.13.3")

// TestVM is the whole way of the brief's node: ISO boot, first install
// with the homelab patch, the data share, the iGPU, bootstrap, and a real
// Kubernetes with PodSecurity baseline.
func TestVM(t *testing.T) {
	t.Parallel()

	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "probe"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	vm := boot(t, talosvm.Spec{Name: "talos-vm", DataDir: data, GPU: true})
	if !vm.Node().Maintenance() {
		t.Fatal("a VM booted from the ISO is not in maintenance mode")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	node := homelabHostname(t)

	c := install(t, ctx, vm, i915Image, homelabPatch(t))

	if got, err := read(ctx, c, "/var/mnt/data/probe"); err != nil || got != "from the host\n" {
		t.Fatalf("read /var/mnt/data/probe: %q %v", got, err)
	}

	// a file the host writes later is there too: the share, not a copy
	if err := os.WriteFile(filepath.Join(data, "later"), []byte("later"), 0o644); err != nil {
		t.Fatal(err)
	}

	if got, err := read(ctx, c, "/var/mnt/data/later"); err != nil || got != "later" {
		t.Fatalf("read /var/mnt/data/later: %q %v", got, err)
	}

	if mods, err := read(ctx, c, "/proc/modules"); err != nil || !strings.Contains(mods, "i915 ") {
		t.Fatalf("/proc/modules with the gpu device and the i915 schematic: %q %v", mods, err)
	}

	if d := dmesg(t, ctx, c); !strings.Contains(d, "i915 0000:00:02.0: [drm]") {
		t.Fatalf("dmesg has no i915 line:\n%s", d)
	}

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	// etcd's health, as talos_bootstrap waits for it, is the real etcd's
	// (the first run builds the binaries: minutes)
	for {
		resp, err := c.ServiceList(ctx)
		if err != nil {
			t.Fatal(err)
		}

		healthy := false

		for _, s := range resp.GetMessages()[0].GetServices() {
			if s.GetId() == "etcd" && s.GetState() == "Running" && s.GetHealth().GetHealthy() {
				healthy = true
			}
		}

		if healthy {
			break
		}

		if ctx.Err() != nil {
			t.Fatal("etcd never healthy")
		}

		time.Sleep(time.Second)
	}

	if err := vm.WaitKubernetes(ctx); err != nil {
		t.Fatal(err)
	}

	kc, err := c.Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}

	host, _, _ := net.SplitHostPort(vm.Addr()) //nolint:errcheck
	if rc.Host != "https://"+host+":6443" {
		t.Fatalf("kubeconfig server %s", rc.Host)
	}

	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	if body, err := k.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || string(body) != "ok" {
		t.Fatalf("/readyz with the node's kubeconfig: %q %v", body, err)
	}

	// kwok, the node's kubelet, keeps the Node named by the config's
	// HostnameConfig Ready
	for {
		n, err := k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		// The node lifecycle controller lifts the not-ready taint a moment
		// after the node turns Ready: wait for it, as a scheduler would.
		if err == nil && ready(n) && !notReadyTainted(n) {
			// The homelab patch allows scheduling on its one control plane.
			if len(n.Spec.Taints) != 0 {
				t.Errorf("the node's taints: %+v, want none (allowSchedulingOnControlPlanes)", n.Spec.Taints)
			}
			break
		}

		if ctx.Err() != nil {
			t.Fatalf("node %s not Ready: %v", node, err)
		}

		time.Sleep(time.Second)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostpath"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/var/mnt/data"},
			}}},
		},
	}

	_, err = k.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) || !strings.Contains(err.Error(), "hostPath") {
		t.Fatalf("a hostPath pod in default: %v", err)
	}

	testJobs(t, ctx, k, c, data, vm.Spec().Dir)
	testRenderNode(t, ctx, k, c)
	interrupted := startInterrupted(t, ctx, k, data)

	// a reboot takes the node's Kubernetes down and up again, etcd's
	// data kept: the Node is still there
	before := vm.KubernetesPIDs()
	if err = c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	for {
		pids := vm.KubernetesPIDs()
		if _, err := k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && pids["kwok"] != 0 && pids["etcd"] != before["etcd"] {
			break
		}

		if ctx.Err() != nil {
			t.Fatal("Kubernetes not back after a reboot")
		}

		time.Sleep(time.Second)
	}

	interrupted(t)

	for name, pid := range before {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) of the boot before the reboot still there: %v", name, pid, err)
		}
	}

	pids := vm.KubernetesPIDs()
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if pids[name] == 0 {
			t.Fatalf("%s is not running: %v", name, pids)
		}
	}

	vm.Stop()

	// all of it gone and reaped (a zombie would still answer signal 0)
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still there after Stop: %v", name, pid, err)
		}
	}

	// the VM started again boots from its disk: installed, bootstrapped,
	// its Kubernetes back with etcd's data
	spec := vm.Spec()
	vm, err = talosvm.Boot(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(vm.Stop)

	if vm.Node().Maintenance() {
		t.Fatal("a VM started again is in maintenance mode")
	}

	for {
		if _, err := k.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			break
		}

		if ctx.Err() != nil {
			t.Fatal("Kubernetes not back after the VM started again")
		}

		time.Sleep(time.Second)
	}
}

func TestBootBadInput(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		spec talosvm.Spec
		want string
	}{
		{talosvm.Spec{Name: "talos", Addr: "10.0.0.5", Dir: t.TempDir()}, `Addr "10.0.0.5" must be an IPv4 address in 127.0.0.0/8`},
		{talosvm.Spec{Name: "talos", Addr: "127.0.9.9"}, "Name and Dir are required"},
		{talosvm.Spec{Name: "talos", Addr: "127.0.9.9", Dir: t.TempDir(), DataDir: "/nonexistent/data"}, "data directory /nonexistent/data is not a directory"},
	} {
		if vm, err := talosvm.Boot(context.Background(), tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `VM "talos"`) {
			if vm != nil {
				vm.Stop()
			}

			t.Errorf("Boot(%+v): %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// TestVMWithoutGPU reproduces the brief's discovery: the iGPU driver needs
// both the gpu device and the i915 schematic; and the data share needs the
// ExternalVolumeConfig document.
func TestVMWithoutGPU(t *testing.T) {
	t.Parallel()

	// No share, but pods still schedule on the one control plane.
	hostnameOnly := []byte("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: lab-node\n---\ncluster:\n  allowSchedulingOnControlPlanes: true\n")

	for _, tc := range []struct {
		name  string
		gpu   bool
		image string
		patch []byte
		share bool // /var/mnt/data is the data share
	}{
		{name: "no gpu device", gpu: false, image: i915Image, patch: homelabPatch(t), share: true},
		{name: "no i915 extension", gpu: true, image: talosnode.InstallerImage("v1.13.3"), patch: hostnameOnly, share: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			data := t.TempDir()
			if err := os.WriteFile(filepath.Join(data, "probe"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}

			vm := boot(t, talosvm.Spec{Name: "talos-vm", DataDir: data, GPU: tc.gpu})

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			c := install(t, ctx, vm, tc.image, tc.patch)

			mods, err := read(ctx, c, "/proc/modules")
			if err != nil || strings.Contains(mods, "i915") || !strings.Contains(mods, "virtiofs") {
				t.Fatalf("/proc/modules: %q %v", mods, err)
			}

			if d := dmesg(t, ctx, c); strings.Contains(d, "i915") {
				t.Fatalf("dmesg has i915 lines:\n%s", d)
			}

			if got, err := read(ctx, c, "/sys/class/drm/renderD128/dev"); err == nil {
				t.Fatalf("a render node without the driver: %q", got)
			}

			got, err := read(ctx, c, "/var/mnt/data/probe")
			if tc.share && (err != nil || got != "x") {
				t.Fatalf("read the share: %q %v", got, err)
			}

			if !tc.share && (err == nil || !strings.Contains(err.Error(), "no such file or directory")) {
				t.Fatalf("read without the ExternalVolumeConfig: %q %v", got, err)
			}

			if !tc.share {
				// no share, no /var/mnt/data on the node: a pod that needs
				// the directory fails as kubelet's type check fails it
				if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
					t.Fatal(err)
				}

				if err := vm.WaitKubernetes(ctx); err != nil {
					t.Fatal(err)
				}

				k := kubeClient(t, ctx, c)
				privileged(t, ctx, k, "jobs")

				writer := func(name string) (*batchv1.Job, *corev1.Pod) {
					return runJob(t, ctx, k, "jobs", name, corev1.PodSpec{
						Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sh", "-c", "echo from the pod > /data/pod"},
							VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
						Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/mnt/data", Type: &dataDir}}}},
					})
				}

				j, pod := writer("without-share")
				if want := "hostPath type check failed: /var/mnt/data is not a directory"; jobCondition(j) != batchv1.JobFailed || !strings.Contains(podMessage(pod), want) {
					t.Fatalf("a hostPath Directory job without the share: %v, pod %s %q", j.Status.Conditions, pod.Status.Phase, podMessage(pod))
				}

				// the volume document added later mounts the share without
				// a reboot, as volume documents apply live
				cur, err := read(ctx, c, talosnode.ConfigPath)
				if err != nil {
					t.Fatal(err)
				}

				ext := "---\napiVersion: v1alpha1\nkind: ExternalVolumeConfig\nname: data\nfilesystemType: virtiofs\nmount:\n  virtiofs:\n    tag: incus_data\n"

				resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte(cur + ext), Mode: machine.ApplyConfigurationRequest_AUTO})
				if err != nil || resp.GetMessages()[0].GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT {
					t.Fatalf("adding the ExternalVolumeConfig: %v %v", resp, err)
				}

				if got, err := read(ctx, c, "/var/mnt/data/probe"); err != nil || got != "x" {
					t.Fatalf("read the share after adding its document: %q %v", got, err)
				}

				if j, pod := writer("with-share"); jobCondition(j) != batchv1.JobComplete {
					t.Fatalf("the job once the share is mounted: %v, pod %s %q", j.Status.Conditions, pod.Status.Phase, podMessage(pod))
				}

				if b, err := os.ReadFile(filepath.Join(data, "pod")); err != nil || string(b) != "from the pod\n" {
					t.Fatalf("the pod's file in the share: %q %v", b, err)
				}
			}

			if !tc.gpu {
				return
			}

			// the fix: an upgrade to the i915 schematic loads the driver
			if _, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage(i915Image), client.WithUpgradeForce(true)); err != nil {
				t.Fatal(err)
			}

			for {
				mods, err := read(ctx, c, "/proc/modules")
				if err == nil && strings.Contains(mods, "i915 ") {
					break
				}

				if ctx.Err() != nil {
					t.Fatalf("no i915 after the upgrade to the i915 schematic: %q %v", mods, err)
				}

				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}

// notReadyTainted says whether the node still carries a taint the node
// lifecycle controller sets while the node is (or was just) not ready.
func notReadyTainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}

	return false
}
