package talosnode_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// A node of Talos 1.14 reports its version, runs a config of 1.14's shape
// (multi-document Kubernetes config), refuses REBOOT, and applies with
// AUTO, TRY or NO_REBOOT a change 1.13 would reboot for, without a reboot.
func TestRelease114Modes(t *testing.T) {
	n := startNode(t, talosnode.Options{Version: "v1.14.1"})
	c, ctx := connect(t, n)

	resp, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if tag := resp.Messages[0].GetVersion().GetTag(); tag != "v1.14.1" {
		t.Fatalf("Version tag %q, want v1.14.1", tag)
	}

	before := n.Config()

	cfg, err := configloader.NewFromBytes(before)
	if err != nil {
		t.Fatal(err)
	}

	if cfg.UnattendedInstallConfig() == nil || cfg.K8sClusterConfig() == nil || !bytes.Contains(before, []byte("kind: KubeNodeConfig")) {
		t.Fatalf("the running config of a 1.14 node is not rendered with the 1.14 contract:\n%s", before)
	}

	// machine.env: outside 1.13's immediate list.
	next := patch(t, before, "machine:\n  env:\n    LAB: \"1\"\n")

	_, err = apply(ctx, c, next, machine.ApplyConfigurationRequest_REBOOT, false, 0)
	wantCode(t, err, codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")

	if !bytes.Equal(n.Config(), before) || !bytes.Equal(n.PersistedConfig(), before) {
		t.Fatal("a refused REBOOT apply changed the config")
	}

	r, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_TRY, true, 0)
	if err != nil {
		t.Fatalf("a TRY dry run of a change 1.13 reboots for: %v", err)
	}

	if m := r.Messages[0]; m.Mode != machine.ApplyConfigurationRequest_TRY || !strings.Contains(m.ModeDetails, "without a reboot") {
		t.Errorf("TRY dry run answered %s %q", m.Mode, m.ModeDetails)
	}

	r, err = apply(ctx, c, next, machine.ApplyConfigurationRequest_AUTO, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	if m := r.Messages[0]; m.Mode != machine.ApplyConfigurationRequest_NO_REBOOT || m.ModeDetails != "Applied configuration without a reboot" {
		t.Errorf("AUTO answered %s %q, want NO_REBOOT without a reboot", m.Mode, m.ModeDetails)
	}

	if !bytes.Equal(n.Config(), next) || !bytes.Equal(n.PersistedConfig(), next) {
		t.Fatal("AUTO(NO_REBOOT) did not apply and persist the config")
	}

	if a := n.Applies(); a[len(a)-1].EffectiveMode != "NO_REBOOT" {
		t.Errorf("the last apply's effective mode is %s", a[len(a)-1].EffectiveMode)
	}

	if !dmesgContains(t, ctx, c, "apply config request: mode auto(no_reboot)") {
		t.Error("dmesg lacks the AUTO(NO_REBOOT) apply")
	}

	next2 := patch(t, next, "machine:\n  env:\n    LAB: \"2\"\n")

	if _, err = apply(ctx, c, next2, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatalf("NO_REBOOT of a machine.env change on 1.14: %v", err)
	}

	if !bytes.Equal(n.Config(), next2) {
		t.Fatal("NO_REBOOT did not apply")
	}
}

// A node of Talos 1.13 keeps 1.13's modes (AUTO resolved by
// CanApplyImmediate) and its config loader: a config of 1.14's shape
// does not decode there.
func TestRelease113RefusesConfigOf114(t *testing.T) {
	n114 := startNode(t, talosnode.Options{Version: "v1.14.1"})
	n := startNode(t, talosnode.Options{Version: "v1.13.3"})
	c, ctx := connect(t, n)

	before := n.Config()
	if bytes.Contains(before, []byte("kind: KubeNodeConfig")) {
		t.Fatalf("a 1.13 node runs a config of 1.14's shape:\n%s", before)
	}

	// The first document 1.13 does not know fails to decode.
	_, err := apply(ctx, c, n114.Config(), machine.ApplyConfigurationRequest_TRY, true, time.Minute)
	wantCode(t, err, codes.InvalidArgument, "\" \"v1alpha1\": not registered")

	if a := n.Applies(); len(a) != 1 || a[0].Err == "" {
		t.Errorf("applies = %+v", a)
	}

	next := patch(t, before, "machine:\n  env:\n    LAB: \"1\"\n")

	_, err = apply(ctx, c, next, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument, "can't be applied in immediate mode")
}
