package talos_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosvm"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// TestFirstInstallOnLabVM runs the platform steps the brief's runbook runs
// against a lab VM booted from the ISO: the first install with the brief's
// patch, talos_read of the data share and of the iGPU's module, the
// bootstrap (its wait sees the real etcd), and a kubeconfig that reaches
// the node's real API server.
func TestFirstInstallOnLabVM(t *testing.T) {
	t.Parallel()

	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, ".probe"), []byte("on the host's RAID\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// a loopback address of its own, whose node ports are free
	addr := freeNodeAddr(t)

	vm, err := talosvm.Boot(context.Background(), talosvm.Spec{
		Name: "talos", Addr: addr, Dir: t.TempDir(), Disks: maintDisks, DataDir: data, GPU: true,
		RebootDuration: 200 * time.Millisecond, Log: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(vm.Stop)

	l := newMaintLab(t, vm.Node(), talosvm.Endpoint(addr))

	conf := l.config(false)
	conf["cluster_endpoint"] = cty.StringVal(talosvm.Endpoint(addr))
	p := l.provider(t, conf)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "verify": verify([]string{"apid", "machined"}, nil)})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}

	var log bytes.Buffer
	if r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log}); r.Diagnostics.HasErrors() {
		t.Fatalf("first install: %v\n%s", r.Diagnostics.Err(), log.String())
	}

	for path, want := range map[string]string{"/var/mnt/data/.probe": "on the host's RAID", "/proc/modules": "i915 "} {
		r := apply(ctx, p, talos.Read, obj(map[string]cty.Value{"path": cty.StringVal(path), "contains": cty.StringVal(want)}), &bytes.Buffer{})
		if err := r.Diagnostics.Err(); err != nil {
			t.Errorf("talos_read %s: %v", path, err)
		}
	}

	log.Reset()

	if r := apply(ctx, p, talos.Bootstrap, cty.EmptyObjectVal, &log); r.Diagnostics.HasErrors() {
		t.Fatalf("bootstrap: %v\n%s", r.Diagnostics.Err(), log.String())
	}

	if !vm.Node().Bootstrapped() || !strings.Contains(log.String(), "etcd") {
		t.Fatalf("bootstrap: node bootstrapped %v, log:\n%s", vm.Node().Bootstrapped(), log.String())
	}

	// In clear, outside the runbook (inside it the step refuses it).
	k := labKube(t, ctx, p, vm)

	if body, err := k.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || !strings.EqualFold(string(body), "ok") {
		t.Fatalf("/readyz with talos_kubeconfig's file: %q %v", body, err)
	}

	// a later config change verified with `kubernetes = true` asks the
	// node's real API server
	l.write(t, "patches/labels.yaml", "machine:\n  nodeLabels:\n    lab: \"yes\"\n")

	v := verify([]string{"apid", "etcd"}, nil).AsValueMap()
	v["kubernetes"] = cty.True
	cfg = obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/labels.yaml"), "verify": obj(v)})

	pr = plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}

	log.Reset()

	if r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log}); r.Diagnostics.HasErrors() {
		t.Fatalf("config change: %v\n%s", r.Diagnostics.Err(), log.String())
	}

	if strings.Contains(log.String(), "Kubernetes check skipped") || !strings.Contains(log.String(), "the Kubernetes API answers") {
		t.Errorf("the Kubernetes check did not run:\n%s", log.String())
	}
}

// freeNodeAddr is a loopback address of a test's own whose node ports
// (apid, the API server, etcd, kubelet) are free.
func freeNodeAddr(t *testing.T) string {
	t.Helper()
	for {
		cand := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 2+rand.IntN(250))
		free := true
		for _, port := range []string{"50000", "6443", "2379", "2380", "10250"} {
			l, err := net.Listen("tcp", net.JoinHostPort(cand, port))
			if err != nil {
				free = false
				break
			}
			l.Close() //nolint:errcheck
		}
		if free {
			return cand
		}
	}
}
