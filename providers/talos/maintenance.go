package talos

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// maintenanceMessage is what a node booted from the ISO answers to Version:
// it needs os:admin, which no client of the maintenance API has.
const maintenanceMessage = "API is not implemented in maintenance mode"

// insecureClient connects to addr as talosctl --insecure does: TLS without
// verifying the server and without a client certificate. Only a node in
// maintenance mode accepts it; an installed node asks for a certificate.
func insecureClient(ctx context.Context, addr string) (*client.Client, error) {
	return client.New(ctx, client.WithEndpoints(addr), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // the maintenance API has no identity to verify
}

// inMaintenance says whether the node is in maintenance mode: over the
// insecure connection its Version answers Unimplemented with the
// maintenance message, exactly as a real node answers talosctl version
// --insecure.
func inMaintenance(ctx context.Context, addr string) bool {
	ctx, cancel := bounded(ctx)
	defer cancel()
	c, err := insecureClient(ctx, addr)
	if err != nil {
		return false
	}
	defer c.Close() //nolint:errcheck
	_, err = c.Version(ctx)
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unimplemented && strings.Contains(st.Message(), maintenanceMessage)
}

// maintenanceNodes lists the nodes that answer as nodes in maintenance
// mode. It is asked only after the mTLS version check failed.
func maintenanceNodes(ctx context.Context, ns []node) []node {
	var out []node
	for _, n := range ns {
		if inMaintenance(ctx, n.name) {
			out = append(out, n)
		}
	}
	return out
}

// namedByRunbook says whether the address is one the runbook's provider
// block names (endpoints or nodes), not one taken from a talosconfig: a
// node in maintenance mode cannot prove who it is, so the first config
// (with the cluster's secrets) goes only where the runbook says.
func (s *settings) namedByRunbook(addr string) bool {
	for _, e := range append(append([]string(nil), s.endpoints...), s.nodes...) {
		if e == addr || hostOf(e) == hostOf(addr) {
			return true
		}
	}
	return false
}

// maintenanceWarning is what every plan of a maintenance-mode first
// install says: the mac check only keeps the config from a machine that
// answers with another MAC by mistake.
const maintenanceWarning = "warning: maintenance mode: the cluster's keys cross the LAN over TLS that authenticates no one, and the MAC read is not authentication (the answering machine reports its MAC itself: any machine of the LAN that takes the address can claim it); a VM on an Incus host takes its config through the host's API with first_install = \"nocloud\"\n"

// installedInMaintenance refuses a node the state records as installed
// that answers in maintenance mode: a node wiped since, or another
// machine of the LAN that took its address and plays one. Either way it
// cannot prove who it is (its MAC is what it says itself), and a first
// config would hand it the cluster's keys.
func (c *call) installedInMaintenance(addr string) phases.Diagnostics {
	return phases.Errorf("Installed Node In Maintenance Mode",
		"The state records that %s installed the node at %s, but what answers there now is in maintenance mode (self-signed TLS, no client authentication): the node was wiped or reset since, or another machine of the LAN took the address and answers as a node waiting for its first config. It cannot prove who it is, and a first config carries the cluster's keys: Nothing is sent. "+
			"Find out what answers at %s (the VM's console in incus console, the router's leases). If the node was wiped on purpose, delete its VM and make it again through the runbook (the VM step's rollback, or a step that discards %s), so that the state no longer records the install; then plan again.",
		c.addr, addr, hostOf(addr), c.addr)
}

// planFirstInstall is the plan of a machine config for nodes in
// maintenance mode: "install: first config", with what will be written
// and where.
func (c *call) planFirstInstall(ctx context.Context, st mcStep, r *rendered, ns []node) sdk.Plan[planned] {
	diags := c.macFor(ns, st.mac)
	var b strings.Builder
	var picks []string // the disk each node installs to
	b.WriteString("install: first config\n")
	b.WriteString(maintenanceWarning)
	if st.mac == "" {
		fmt.Fprintf(&b, "note: the node's identity was not checked (no mac set): the first config goes to whatever machine answers in maintenance mode at %s\n", strings.Join(c.p.targets(), ", "))
	}
	for _, n := range ns {
		if !c.s.namedByRunbook(n.name) {
			diags = append(diags, phases.Errorf("First Install Not Allowed",
				"Node %s is in maintenance mode (booted from the Talos ISO: self-signed TLS, no client authentication), so it cannot prove who it is, and %s would send it the cluster's secrets. The first config is sent only to an address the runbook names in the talos provider block (endpoints or nodes, e.g. the ipv4 output of the VM a step just created); %s comes from the talosconfig. Name it in the provider block to install it.",
				n.name, c.addr, n.name)...)
			continue
		}
		if d := c.guardMaintenance(ctx, n.name); d.HasErrors() {
			diags = append(diags, d...)
			continue
		}
		fmt.Fprintf(&b, "node %s booted Talos %s, the pinned version\n", n.name, c.s.version)
		disks, err := maintenanceDisks(ctx, n.name)
		if err != nil {
			diags = append(diags, phases.Errorf("Cannot Read Disks", "Reading the disks of node %s (maintenance mode), which the first install of %s is checked against, failed: %v.", n.name, c.addr, err)...)
			continue
		}
		if st.mac != "" && !diags.HasErrors() {
			l, d := c.insecureCheckMAC(ctx, n.name, st.mac, "")
			if d.HasErrors() {
				diags = append(diags, d...)
				continue
			}
			fmt.Fprintf(&b, "node %s is %s, the VM's NIC (link %s)\n", n.name, l.mac, l.name)
		}
		pick, d := c.checkDisks(n.name, r, disks)
		diags = append(diags, d...)
		picks = append(picks, "node "+n.name+": "+pick)
		fmt.Fprintf(&b, "node %s: disks %s\n", n.name, diskList(disks))
		fmt.Fprintf(&b, "node %s: maintenance mode (self-signed TLS, no client auth, as talosctl --insecure sees it); first apply allowed only to %s (the address the runbook names)\n", n.name, n.name)
	}
	b.WriteString(c.s.installDiskLine(picks, "checked against the node's disks"))
	b.WriteString(c.s.schematicLine(r.image))
	fmt.Fprintf(&b, "machine config (%s) rendered for Talos %s, Kubernetes %s: %s\n", st.role, c.s.version, c.s.k8sVersion, configSummary(r.cfg))
	if len(st.patches) > 0 {
		fmt.Fprintf(&b, "patches: %s\n", strings.Join(st.patches, ", "))
	}
	fmt.Fprintf(&b, "rendered config sha256: %s\n", r.hash)
	fmt.Fprintf(&b, "then: wait for the install and the reboot, continue over mTLS with the talosconfig of the same secrets bundle: version-skew check, verify (%s)\n", st.verify)
	pl := planned{Nodes: map[string]string{}, Rendered: r.hash}
	for _, n := range ns {
		pl.FirstInstall = append(pl.FirstInstall, n.name)
	}
	return sdk.Plan[planned]{Diff: b.String(), Private: pl, Diagnostics: diags,
		Irreversible: "a first install writes Talos to the install disk of a node in maintenance mode; rollback cannot undo it (that takes a wipe and the ISO)"}
}

// configSummary names the documents of a rendered config, in order.
func configSummary(cfg coreconfig.Provider) string {
	var docs []string
	for _, d := range cfg.Documents() {
		name := d.Kind()
		if nd, ok := d.(configconfig.NamedDocument); ok && nd.Name() != "" {
			name += " " + nd.Name()
		}
		docs = append(docs, name)
	}
	return fmt.Sprintf("%d documents (%s)", len(docs), strings.Join(docs, ", "))
}

// firstInstall sends the first config to nodes in maintenance mode over
// the insecure connection (as talosctl apply-config --insecure does),
// waits for the install and the reboot, then goes on over mTLS with the
// talosconfig of the same bundle: the version-skew guard and the verify
// checks. An install cannot be undone: there is no revert data.
func (c *call) firstInstall(ctx context.Context, st mcStep, r *rendered, ns []node) mcApply {
	if d := c.macFor(ns, st.mac); d.HasErrors() {
		return mcApply{Diagnostics: d}
	}
	for _, n := range ns {
		if !c.s.namedByRunbook(n.name) {
			return mcApply{Diagnostics: phases.Errorf("First Install Not Allowed",
				"Node %s is in maintenance mode and cannot prove who it is; %s sends the first config (with the cluster's secrets) only to an address the runbook names in the talos provider block (endpoints or nodes), and %s comes from the talosconfig. Nothing was sent.",
				n.name, c.addr, n.name)}
		}
		if d := c.guardMaintenance(ctx, n.name); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
		disks, err := maintenanceDisks(ctx, n.name)
		if err != nil {
			return mcApply{Diagnostics: phases.Errorf("Cannot Read Disks", "Reading the disks of node %s (maintenance mode) before the first install of %s failed: %v. Nothing was sent.", n.name, c.addr, err)}
		}
		if _, d := c.checkDisks(n.name, r, disks); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
		if d := c.sendFirstConfig(ctx, n, r, st.mac); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
	}
	// The shared client failed its handshakes against the maintenance
	// certificate; a fresh one dials the installed node.
	_ = c.p.close()
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return mcApply{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	for _, n := range ns {
		c.log.Printf("node %s: waiting for the install and the reboot (mTLS with the talosconfig)", n.name)
		if err := waitVersion(ctx, n, ""); err != nil {
			return mcApply{Diagnostics: phases.Errorf("Node Did Not Come Back", "Node %s did not answer over mTLS after the first install of %s: %v. A failed install leaves it in maintenance mode (its console or dmesg says why).", n.name, c.addr, err)}
		}
	}
	if d := c.p.guard(ctx, c, ns); d.HasErrors() {
		return mcApply{Diagnostics: d}
	}
	for _, n := range ns {
		checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err := c.verify(checkCtx, n, st.verify)
		cancel()
		if err != nil {
			c.captureDmesg(ctx, n)
			return mcApply{Diagnostics: phases.Errorf("Verify Failed", "A check of %s failed after the first install of node %s: %v. An install is not undone by itself; the dmesg tail is in the step's log.", c.addr, n.name, err)}
		}
		c.log.Printf("node %s: installed; checks passed (%s)", n.name, st.verify)
	}
	c.log.Printf("no rollback for %s: a first install cannot be undone", c.addr)
	return mcApply{Outputs: outputsOf(r)}
}

// sendFirstConfig applies the config to one node in maintenance mode;
// with a mac, only after its links, read on the same connection right
// before, show that MAC (the address may have changed hands since the
// plan).
func (c *call) sendFirstConfig(ctx context.Context, n node, r *rendered, mac string) phases.Diagnostics {
	actx, cancel := bounded(ctx)
	defer cancel()
	ic, err := insecureClient(actx, n.name)
	if err != nil {
		return phases.FromError("Cannot Reach Talos", err)
	}
	defer ic.Close() //nolint:errcheck
	if mac != "" {
		l, d := c.checkMAC(actx, ic, n.name, mac, " Nothing was sent.")
		if d.HasErrors() {
			return d
		}
		c.log.Printf("node %s is %s, the VM's NIC (link %s)", n.name, l.mac, l.name)
	}
	c.log.Printf("node %s: maintenance mode: sending the first config (sha256 %s, installer %s, install disk %s)", n.name, r.hash, r.image, c.s.install)
	resp, err := ic.ApplyConfiguration(actx, &machineapi.ApplyConfigurationRequest{Data: r.bytes, Mode: machineapi.ApplyConfigurationRequest_AUTO})
	if err != nil {
		return phases.Errorf("Machine Config Refused", "Node %s (maintenance mode) refused the first config of %s: %v. Nothing was installed.", n.name, c.addr, apiErr("ApplyConfiguration", err))
	}
	for _, m := range resp.GetMessages() {
		for _, w := range m.GetWarnings() {
			c.log.Printf("node %s: warning: %s", n.name, w)
		}
	}
	return nil
}

// maintenanceVersion is the Talos version a node in maintenance mode runs,
// the image it booted: its Version resource, as talosctl get version
// --insecure reads it (the Version RPC is not open in maintenance mode).
func maintenanceVersion(ctx context.Context, addr string) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	c, err := insecureClient(ctx, addr)
	if err != nil {
		return "", err
	}
	defer c.Close() //nolint:errcheck
	v, err := safe.StateGet[*runtime.Version](ctx, c.COSI, runtime.NewVersion().Metadata())
	if err != nil {
		return "", err // its status tells a resource not served (guardMaintenance)
	}
	return v.TypedSpec().Version, nil
}

// guardMaintenance is the version-skew guard of a node in maintenance
// mode: the image it booted must be of the pinned version. The config is
// rendered for the pin, and a node booted from an ISO of another version
// validates and installs it as that version does.
func (c *call) guardMaintenance(ctx context.Context, addr string) phases.Diagnostics {
	v, err := maintenanceVersion(ctx, addr)
	if st, ok := status.FromError(err); err != nil && ok && (st.Code() == codes.NotFound || st.Code() == codes.PermissionDenied || st.Code() == codes.Unimplemented) {
		// A node that does not serve the resource: the guard runs over
		// mTLS once it is installed, as before.
		c.log.Printf("node %s (maintenance mode) does not say the version it booted (%v): checked after the install", addr, apiErr("COSI Get runtime.Version", err))
		return nil
	}
	if err != nil {
		return phases.Errorf("Cannot Read Talos Version", "Node %s (maintenance mode) did not say the version it booted (the skew guard needs it before the first install): %v. Nothing was sent.", addr, apiErr("COSI Get runtime.Version", err))
	}
	if !sameVersion(v, c.s.version) {
		return phases.Errorf("Talos Version Skew",
			"Node %s booted Talos %s (maintenance mode: the ISO's version), but the talos provider block pins version = %q. Its first config is rendered for %s, with the installer image %s, and would be validated and installed by a node of another release. Nothing was sent. Boot the VM from the ISO of the pinned version (talos_image of this provider downloads it), or pin version = %q.",
			addr, v, c.s.version, c.s.version, c.s.installerImage(c.s.version), v)
	}
	return nil
}
