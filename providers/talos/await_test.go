package talos_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// directClient is a client of the node of its own (talosctl's view).
func directClient(t *testing.T, n *talosnode.Node) *client.Client {
	t.Helper()
	cfg, err := clientconfig.Open(n.TalosconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// untilRebooting waits until the node's API stops answering (a reboot
// under way), at most a minute.
func untilRebooting(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		c.Conn().ResetConnectBackoff()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Version(ctx)
		cancel()
		if err != nil && strings.Contains(err.Error(), "Unavailable") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the node never went down to reboot")
}

// TestUpgradeRightAfterTheNodeCameUp: the plan asked the node before it
// was up (its VM not started yet), and the refused dials left the gRPC
// channel in its reconnect backoff. The node then comes up: the step's
// calls must reach it at once, not fail "connection refused" until the
// backoff ends (up to 2 minutes later).
func TestUpgradeRightAfterTheNodeCameUp(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	addr, dir := l.n.Addr(), filepath.Dir(l.n.TalosconfigPath())
	p := l.provider(t, nil)
	l.n.Stop()

	// The plan, made while the node is down, dials it again and again:
	// gRPC's backoff grows (1 s, 1.6 s, 2.6 s, 4.1 s, 6.6 s…).
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if pr := plan(p, talos.Upgrade, upgradeTo("v1.13.3")); pr.Diagnostics.HasErrors() {
			t.Fatalf("the plan of a node not up yet: %v", pr.Diagnostics.Err())
		}
	}
	n, err := talosnode.New(talosnode.Options{Dir: dir, Version: "v1.13.2", ClusterName: "lab", Hostname: "lab-node", Extensions: labFactory})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)

	start := time.Now()
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.Upgrade, upgradeTo("v1.13.3"), &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("the upgrade right after the node came up: %v\n%s", err, log.String())
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the upgrade took %s", took)
	}
	wantAll(t, "log", log.String(), "verified: runs Talos v1.13.3")
}

// TestUpgradeRevertResumedWhileTheNodeReboots: a rollback was stopped
// while its revert's upgrade back rebooted the node. The revert, resumed
// while the node still reboots, waits for it to answer instead of failing
// "connection refused", then does only what is left: nothing, the node
// came back on what it ran before.
func TestUpgradeRevertResumedWhileTheNodeReboots(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.2", RebootDuration: 4 * time.Second})
	p := l.provider(t, nil)
	direct := directClient(t, l.n)
	addr := phases.Address{Type: talos.Upgrade, Name: "node"}

	r := apply(context.Background(), p, talos.Upgrade, upgradeTo("v1.13.3"), &bytes.Buffer{})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Revert == nil {
		t.Fatal("no revert data")
	}

	// The rollback, stopped while its upgrade back reboots the node.
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan providers.RevertResponse, 1)
	go func() {
		done <- p.Revert(ctx, providers.RevertRequest{Type: talos.Upgrade, Addr: addr, Config: upgradeTo("v1.13.3"), Revert: *r.Revert, Log: &providertest.SyncBuffer{}})
	}()
	untilRebooting(t, direct)
	stop()
	if rv := <-done; !rv.Diagnostics.HasErrors() {
		t.Fatal("the stopped revert finished")
	}

	var log bytes.Buffer
	rv := p.Revert(context.Background(), providers.RevertRequest{Type: talos.Upgrade, Addr: addr, Config: upgradeTo("v1.13.3"), Revert: *r.Revert, Resumed: true, Log: &log})
	if err := rv.Diagnostics.Err(); err != nil {
		t.Fatalf("the resumed revert: %v\n%s", err, log.String())
	}
	t.Logf("the resumed revert's log:\n%s", log.String())
	wantAll(t, "log", log.String(), "the revert of talos_upgrade.node resumes: waiting up to 15m0s for node 127.0.0.1 to answer", "answers again", "runs Talos v1.13.2")
	if strings.Contains(log.String(), "upgrading from") {
		t.Errorf("the resumed revert upgraded again:\n%s", log.String())
	}
	if running, _ := l.n.Boot(); running.Version != "v1.13.2" {
		t.Errorf("after the rollback the node runs %+v", running)
	}
}

// TestUpgradeInFlightReadWaitsForTheReboot: a run was stopped while the
// upgrade rebooted the node. The next run's read of the step waits for
// the node to answer, and finds the upgrade done, instead of failing
// "connection refused".
func TestUpgradeInFlightReadWaitsForTheReboot(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.2", RebootDuration: 4 * time.Second})
	p := l.provider(t, nil)
	direct := directClient(t, l.n)

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan providers.ApplyResponse, 1)
	go func() {
		done <- p.Apply(ctx, providers.ApplyRequest{Type: talos.Upgrade, Addr: phases.Address{Type: talos.Upgrade, Name: "node"}, Config: upgradeTo("v1.13.3"), Log: &providertest.SyncBuffer{}})
	}()
	untilRebooting(t, direct)
	stop()
	if a := <-done; !a.Diagnostics.HasErrors() {
		t.Fatal("the stopped upgrade finished")
	}

	// (A read has no log: the engine says that it reads the step.)
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.Upgrade, Addr: phases.Address{Type: talos.Upgrade, Name: "node"}, Config: upgradeTo("v1.13.3"), InFlight: true})
	if rr.Diagnostics.HasErrors() || rr.Observation != providers.Present {
		t.Fatalf("the in-flight read: %v %v (%s)", rr.Observation, rr.Diagnostics, rr.Detail)
	}
	if got := rr.Outputs.GetAttr("version").AsString(); got != "v1.13.3" {
		t.Errorf("version output %q", got)
	}
}

// TestConfigReadOfARebootingNodeIsNoPlanError: the plan reads a done
// machine config whose node reboots (an upgrade after it was stopped in
// flight). That fails no plan: the step stays as recorded, with a
// warning, and reads Present once the node answers again.
func TestConfigReadOfARebootingNodeIsNoPlanError(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.3", RebootDuration: 4 * time.Second})
	p := l.provider(t, nil)
	direct := directClient(t, l.n)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	prior := &providers.Prior{Private: r.Private}
	if r.Revert != nil {
		prior.Revert = r.Revert
	}

	if err := direct.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	untilRebooting(t, direct)
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	if rr.Diagnostics.HasErrors() || rr.Observation != providers.Unknown {
		t.Fatalf("the plan's read of a rebooting node: %v %v", rr.Observation, rr.Diagnostics)
	}
	if len(rr.Diagnostics) != 1 || rr.Diagnostics[0].Severity != phases.Warning || !strings.Contains(rr.Diagnostics[0].Detail, "does not answer now") {
		t.Errorf("want one warning that the node does not answer, got %v", rr.Diagnostics)
	}

	deadline := time.Now().Add(time.Minute)
	for {
		rr = p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
		if rr.Observation == providers.Present || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if rr.Observation != providers.Present || rr.Diagnostics.HasErrors() {
		t.Errorf("the read once the node answers: %v %v (%s)", rr.Observation, rr.Diagnostics, rr.Detail)
	}
}
