package helm_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/zclconf/go-cty/cty"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// labNode is the control plane of a lab Talos node (lab/kubecp) on
// 127.25.2.2 (block 25), whose Job pods run for real and whose kubelet
// endpoint serves their logs, unlike kube-up.sh's kwok-only cluster.
func labNode(t *testing.T) *kube {
	t.Helper()

	in, err := generate.NewInput("lab", "https://127.25.2.2:6443", constants.DefaultKubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	secretbox, _ := kubecp.EncryptionKeys(cfg)
	bin, err := kubecp.Binaries(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, host := t.TempDir(), t.TempDir()
	cp, err := kubecp.Start(ctx, kubecp.Config{
		Dir: dir, EtcdDir: filepath.Join(dir, "etcd"), Addr: "127.25.2.2", NodeName: "talos-lab", Bin: bin,
		CA: cfg.K8sAPIServerCAConfig().IssuingCA(), ServiceAccountKey: cfg.K8sServiceAccountConfig().IssuingKey().Key,
		SecretboxKey: secretbox,
		HostPath:     func(p string) (string, error) { return filepath.Join(host, p), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	rc, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{path: cp.Kubeconfig(), client: cs}
}

// TestJobLogsFromALabNode: a kubernetes_job step streams its pod's real
// output into the step log while the pod runs (the lab node serves
// pods/log as a kubelet does); a failing pod's last lines are in the
// step's error.
func TestJobLogsFromALabNode(t *testing.T) {
	t.Parallel()
	k := labNode(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "joblogs")

	script := "echo restoring dump; echo 42 tables >&2; sleep 1; echo restore done"
	cfg := jobConfig(k, ns, "restore", podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{
		"command": cty.TupleVal([]cty.Value{str("sh"), str("-c"), str(script)}),
	})}), nil)
	var log bytes.Buffer
	a := apply(t, p, helm.Job, "restore", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog:\n%s", err, log.String())
	}
	pod := outputString(t, a.Outputs, "pod")
	contains(t, "the step log", log.String(), pod+": restoring dump\n", pod+": 42 tables\n", pod+": restore done\n")
	if strings.Contains(log.String(), "no logs") {
		t.Errorf("the step log says the node serves no logs:\n%s", log.String())
	}

	fail := jobConfig(k, ns, "broken", podTemplate(nil, map[string]cty.Value{"container": obj(map[string]cty.Value{
		"command": cty.TupleVal([]cty.Value{str("sh"), str("-c"), str("echo reading dump; echo dump truncated at 4096 >&2; exit 2")}),
	})}), nil)
	log.Reset()
	a = apply(t, p, helm.Job, "broken", fail, nil, &log)
	err := a.Diagnostics.Err()
	if err == nil {
		t.Fatalf("a failing Job's step succeeded; log:\n%s", log.String())
	}
	contains(t, "the error", err.Error(), "exit code 2", "Its last log lines:\n  reading dump\n  dump truncated at 4096")
	contains(t, "the step log", log.String(), ": dump truncated at 4096\n")
}
