package talos

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// mcStep is a decoded talos_machine_config step.
type mcStep struct {
	role     string
	patches  []string
	mode     machineapi.ApplyConfigurationRequest_Mode
	modeName string
	try      time.Duration
	verify   verifySpec
	rendered string
	// withSecrets: rendered_secrets = "include".
	withSecrets bool
	// mac: the MAC the node in maintenance mode must have (normalized),
	// "" when not checked.
	mac string
	// boot: how long a first install waits for its node to answer.
	boot time.Duration
	// nocloud: first_install = "nocloud", the first config goes through
	// the Incus host's API (nocloud.go).
	nocloud bool
}

// verifySpec is what must hold while the TRY is pending.
type verifySpec struct {
	services   []string
	files      map[string]string
	kubernetes bool
}

func (v verifySpec) empty() bool {
	return len(v.services) == 0 && len(v.files) == 0 && !v.kubernetes
}

func (v verifySpec) String() string {
	var parts []string
	if len(v.services) > 0 {
		parts = append(parts, "services healthy: "+strings.Join(v.services, ", "))
	}
	if len(v.files) > 0 {
		paths := make([]string, 0, len(v.files))
		for p := range v.files {
			paths = append(paths, p)
		}
		parts = append(parts, "files: "+strings.Join(sortStrings(paths), ", "))
	}
	if v.kubernetes {
		parts = append(parts, "the Kubernetes API answers")
	}
	if len(parts) == 0 {
		return "no checks"
	}
	return strings.Join(parts, "; ")
}

var modes = map[string]machineapi.ApplyConfigurationRequest_Mode{
	"no-reboot": machineapi.ApplyConfigurationRequest_NO_REBOOT,
	"auto":      machineapi.ApplyConfigurationRequest_AUTO,
	"reboot":    machineapi.ApplyConfigurationRequest_REBOOT,
}

// known reports whether none of the attributes is unknown.
func known(c *call, names ...string) bool {
	for _, n := range names {
		if c.Unknown(n) {
			return false
		}
	}
	return true
}

// setting is an attribute with a default: def when not set or not known.
func setting(c *call, name string, v *string, def string) (string, bool) {
	if c.Unknown(name) {
		return def, false
	}
	return or(v, def), true
}

// decodeMachineConfig reads the step; known is false when a value that
// matters is not known until apply.
func decodeMachineConfig(c *call, a mcAttrs) (st mcStep, isKnown bool, diags phases.Diagnostics) {
	st.role, _ = setting(c, "role", a.Role, "controlplane")
	st.patches = a.Patches
	var k bool
	if st.modeName, k = setting(c, "mode", a.Mode, "no-reboot"); k {
		m, ok := modes[st.modeName]
		switch {
		case !ok:
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The \"mode\" attribute of %s must be %s, not %q.", c.addr, modesOf(c.s.version), st.modeName)...)
		case m == machineapi.ApplyConfigurationRequest_REBOOT && rebootModeRemoved(c.s.version):
			// The node would refuse it (Unimplemented) after the TRY passed.
			diags = append(diags, phases.Errorf("Apply Mode Not In This Release", "The \"mode\" attribute of %s is \"reboot\", which Talos %s refuses (\"the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead\"): since 1.14 every change applies without a reboot. Set mode = \"auto\" or \"no-reboot\" (the same on 1.14), or remove it.", c.addr, c.s.version)...)
		}
		st.mode = m
	}
	if tt, k := setting(c, "try_timeout", a.TryTimeout, "1m"); k {
		d, err := time.ParseDuration(tt)
		if err != nil || d < time.Second {
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The \"try_timeout\" attribute of %s must be a duration of at least 1s, such as \"1m\", not %q.", c.addr, tt)...)
		}
		st.try = d
	}
	if bt, k := setting(c, "boot_timeout", a.BootTimeout, "5m"); k {
		d, err := time.ParseDuration(bt)
		if err != nil || d < 0 {
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The \"boot_timeout\" attribute of %s must be a duration, such as \"5m\", not %q.", c.addr, bt)...)
		}
		st.boot = d
	}
	if !c.Unknown("rendered") { // else nothing is written
		st.rendered = a.Rendered
	}
	if rs, k := setting(c, "rendered_secrets", a.RenderedSecrets, "redact"); k {
		if rs != "redact" && rs != "include" {
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The \"rendered_secrets\" attribute of %s must be \"redact\" or \"include\", not %q.", c.addr, rs)...)
		}
		st.withSecrets = rs == "include"
	}
	if a.MAC != nil && !c.Unknown("mac") {
		st.mac, _ = normalizeMAC(*a.MAC) // refused at validate when it does not parse
		c.mac = st.mac
	}
	if fi, k := setting(c, "first_install", a.FirstInstall, firstInstallMaintenance); k {
		if fi != firstInstallMaintenance && fi != firstInstallNocloud {
			diags = append(diags, phases.Errorf("Invalid Attribute Value", "The \"first_install\" attribute of %s must be %q (the config goes into the VM's cloud-init.user-data through the Incus host's API) or %q (sent over the LAN to the node in maintenance mode, unauthenticated), not %q.", c.addr, firstInstallNocloud, firstInstallMaintenance, fi)...)
		}
		st.nocloud = fi == firstInstallNocloud
	}
	if !c.Unknown("verify") { // else no checks (a revert may not know them)
		st.verify = verifySpec{services: a.Verify.Services, files: a.Verify.Files, kubernetes: a.Verify.Kubernetes}
	}
	return st, known(c, "role", "patches", "mode", "try_timeout", "verify", "mac", "first_install"), diags
}

// planned is the Private of a machine config plan: the hash of each node's
// persisted config, the version token Apply checks.
type planned struct {
	Nodes    map[string]string `json:"nodes"`
	Rendered string            `json:"rendered"`
	// FirstInstall lists the nodes planned in maintenance mode: their
	// first config installs them.
	FirstInstall []string `json:"first_install,omitempty"`
	// Nocloud: planned as a first install through the Incus host's API
	// (the apply gives user_data, sends nothing).
	Nocloud bool `json:"nocloud,omitempty"`
}

type mcPrior = sdk.Prior[planned, machineConfigRevert]

// MachineConfig is the talos_machine_config step type.
const MachineConfig = "talos_machine_config"

// mcAttrs is a talos_machine_config step. Pointers are the
// attributes with a default (nil: not set).
type mcAttrs struct {
	Role       *string     `cty:"role" doc:"\"controlplane\" (default) or \"worker\"."`
	Patches    []string    `cty:"patches" doc:"Patch files (strategic merge, multi-document, or JSON patches), relative to the runbook."`
	Mode       *string     `cty:"mode" doc:"\"no-reboot\" (default), \"auto\" or \"reboot\": what the permanent apply may do. Talos 1.13 reboots for a change outside its immediate list with \"auto\" or \"reboot\" (no TRY then); Talos 1.14 applies every change without a reboot, resolves \"auto\" to no-reboot and has no \"reboot\" (refused at plan)."`
	TryTimeout *string     `cty:"try_timeout" doc:"How long the TRY stays before the node reverts it by itself, \"1m\" by default."`
	Verify     verifyAttrs `cty:"verify" doc:"Checks run while the TRY is pending: services (healthy), files (path -> content, read through the API), kubernetes (the API answers)."`
	Rendered   string      `cty:"rendered" doc:"Write the rendered config here (mode 0600) for review, during run only (plan writes nothing)."`
	// RenderedSecrets: the PKI keys and tokens are redacted from the
	// rendered file unless the user asks for them.
	RenderedSecrets *string `cty:"rendered_secrets" doc:"\"redact\" (default): the rendered file has its keys, tokens and secrets redacted; \"include\": written as sent to the node."`
	// MAC: the node in maintenance mode cannot prove who it is; its NIC's
	// MAC says it is the VM (mac.go).
	BootTimeout  *string `cty:"boot_timeout" doc:"How long a first install waits for the node to answer at its address (a VM booting from the ISO, its address leased by the router), \"5m\" by default; the first Ctrl-C ends the wait."`
	FirstInstall *string `cty:"first_install" doc:"How a VM's first config reaches it: \"nocloud\" (the config is the user_data output, which the VM's incus_instance step puts in its cloud-init.user-data with a disk of source cloud-init:config before it first boots a nocloud image: it goes through the Incus host's authenticated API and never crosses the LAN; nothing is sent to the node) or \"maintenance\" (default: sent over the LAN to the node in maintenance mode, whose TLS authenticates no one; the plan says so)."`
	MAC          *string `cty:"mac" doc:"The MAC of the VM's NIC (e.g. \"10:66:6a:00:00:01\", any usual form): before the first config is sent to a node in maintenance mode, at plan and again right before the apply, the node at the address must have a link with this MAC (as talosctl get links --insecure lists them), else nothing is sent. One node per step (a step with several nodes refuses it). Not checked on an installed node (its certificates are its identity). Unset: the node's identity is not checked."`
}

// verifyAttrs is what must hold while the TRY is pending.
type verifyAttrs struct {
	Services   []string          `cty:"services" optional:"true"`
	Files      map[string]string `cty:"files" optional:"true"`
	Kubernetes bool              `cty:"kubernetes" optional:"true"`
}

// mcOutputs are a talos_machine_config step's outputs.
type mcOutputs struct {
	ConfigHash     string `cty:"config_hash"`
	InstallerImage string `cty:"installer_image"`
	// Node is the Kubernetes node the config registers (nodeOf), known
	// at plan: kubernetes_ready's node_spec takes it, so that pods are
	// judged against the node before the cluster exists.
	Node nodeOutputs `cty:"node"`
	// UserData is the rendered config, with the cluster's keys, for the
	// VM's cloud-init.user-data (first_install = "nocloud"; "" else):
	// known after apply only, never in a plan, redacted in the state.
	UserData string `cty:"user_data" sensitive:"true"`
	// userDataParts are the secrets inside UserData (SecretParts).
	userDataParts []string
}

// SecretParts makes user_data a document whose secrets are known one by
// one (sdk.SecretDocuments): its keys are scrubbed, its host names not.
// Unknown parts leave it a secret like any other.
func (o mcOutputs) SecretParts() map[string][]string {
	if o.UserData == "" || o.userDataParts == nil {
		return nil
	}
	return map[string][]string{"user_data": o.userDataParts}
}

// outputsOf are the outputs of a step that applies r.
func outputsOf(r *rendered) mcOutputs {
	return mcOutputs{ConfigHash: r.hash, InstallerImage: r.image, Node: nodeOf(r.cfg)}
}

// withNode gives a plan the outputs r makes known: all but the config's
// hash, which the nodes' own config may still change (known after apply).
func withNode(p sdk.Plan[planned], r *rendered) sdk.Plan[planned] {
	if !p.Diagnostics.HasErrors() {
		p.Outputs, p.Unknown = outputsOf(r), []string{"config_hash", "user_data"}
	}
	return p
}

var machineConfigStep = &sdk.StepType[*Provider, mcAttrs, planned, machineConfigRevert]{
	Name:        MachineConfig,
	Description: "Renders the machine config (secrets bundle + patches, pinned version), validates it, shows the node's dry-run diff, then applies it with TRY, the verify checks and the permanent apply. Before it changes a control-plane node whose etcd runs, it takes an etcd snapshot, kept age-encrypted in etcd-snapshots/ of the state's directory.",
	Rollback:    "Re-applies the previous config through the same ladder (dry-run, TRY, verify, apply); it is kept in the state age-encrypted, so without an age identity the step is irreversible. A control-plane node whose etcd is lost first gets it back from the etcd snapshot taken before the change (EtcdRecover, then a bootstrap with recover_etcd); the rollback plan names it. A first install cannot be undone.",
	Outputs:     mcOutputs{},
	Unknowns:    true, // the plan says which settings are known after earlier steps
	Validate:    func(sc *handle, a *mcAttrs) phases.Diagnostics { return validateMAC(newCall(sc), a) },
	Read:        readMachineConfig,
	Plan: func(ctx context.Context, sc *handle, a mcAttrs, prior *mcPrior) sdk.Plan[planned] {
		c := newCall(sc)
		r := planMachineConfig(ctx, c, a, prior != nil)
		if c.s.recipient == nil && r.Irreversible == "" {
			// The previous config is kept only age-encrypted (sealRevert).
			r.Irreversible = "its previous config can be kept for rollback only age-encrypted, but " + c.s.noKeyWhy + ": set age_identity or " + IdentityEnv
		}
		return r
	},
	Apply:  applyMachineConfig,
	Revert: revertMachineConfig,
	// The rendered machine config's hash joins the step's input hash: a
	// changed patch file, secrets bundle or pinned version is then
	// planned as an update of the step.
	Digest: func(_ context.Context, sc *handle, a mcAttrs) (string, phases.Diagnostics) {
		c := newCall(sc)
		st, _, diags := decodeMachineConfig(c, a)
		if diags.HasErrors() {
			return "", diags
		}
		r, diags := c.render(st.role, st.patches)
		if diags.HasErrors() {
			return "", diags
		}
		return r.hash, nil
	},
}

// installed says the state records the step applied: its nodes run a
// config of the cluster, and none of them may be sent a first one.
func planMachineConfig(ctx context.Context, c *call, a mcAttrs, installed bool) sdk.Plan[planned] {
	st, known, diags := decodeMachineConfig(c, a)
	if diags.HasErrors() {
		return sdk.Plan[planned]{Diagnostics: diags}
	}
	if !known {
		return sdk.Plan[planned]{Diff: fmt.Sprintf("render and apply the machine config of %s (its settings are known after earlier steps run; the node's dry-run diff is shown then)", c.addr)}
	}
	r, diags := c.render(st.role, st.patches)
	if diags.HasErrors() {
		return sdk.Plan[planned]{Diagnostics: diags}
	}
	if st.nocloud && !installed && !c.answersSoon(ctx) {
		return withNode(c.planNocloud(st, r), r)
	}
	if c.AfterChanges && !c.answersSoon(ctx) {
		// Its VM is made or started by a step it depends on, in this run.
		var b strings.Builder
		fmt.Fprintf(&b, "install: first config, once the steps it depends on ran: no node answers at %s yet (its VM is still to be made or booted)\n", c.endpoints())
		b.WriteString(maintenanceWarning)
		b.WriteString(c.s.installDiskLine(nil, "checked against the node's disks before anything is sent"))
		b.WriteString(c.s.schematicLine(r.image))
		fmt.Fprintf(&b, "machine config (%s) rendered for Talos %s, Kubernetes %s: %s\n", st.role, c.s.version, c.s.k8sVersion, configSummary(r.cfg))
		fmt.Fprintf(&b, "rendered config sha256: %s\n", r.hash)
		b.WriteString("then: the node's disks are checked against the install disk before anything is sent; a node that is not in maintenance mode gets the change through the ladder instead")
		return withNode(sdk.Plan[planned]{Diff: b.String(), Private: planned{Nodes: map[string]string{}, Rendered: r.hash, FirstInstall: c.s.endpoints},
			Irreversible: "a first install writes Talos to the install disk of a node in maintenance mode; rollback cannot undo it (that takes a wipe and the ISO)"}, r)
	}
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return sdk.Plan[planned]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.p.guard(ctx, c, ns); d.HasErrors() {
		// A node booted from the ISO fails the mTLS dial: is it waiting
		// for its first config?
		if m := maintenanceNodes(ctx, ns); len(m) > 0 && len(m) == len(ns) {
			if installed {
				return sdk.Plan[planned]{Diagnostics: c.installedInMaintenance(m[0].name)}
			}
			if st.nocloud {
				return sdk.Plan[planned]{Diagnostics: c.nocloudInMaintenance(m[0].name)}
			}
			return withNode(c.planFirstInstall(ctx, st, r, ns), r)
		}
		return sdk.Plan[planned]{Diagnostics: d}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "machine config (%s) rendered for Talos %s, Kubernetes %s\n", st.role, c.s.version, c.s.k8sVersion)
	fmt.Fprintf(&b, "installer image: %s\n", r.image)
	if len(st.patches) > 0 {
		fmt.Fprintf(&b, "patches: %s\n", strings.Join(st.patches, ", "))
	}
	fmt.Fprintf(&b, "ladder: TRY for %s -> verify (%s) -> %s%s\n", st.try, st.verify, st.modeName, modeNote(c.s.version, st.modeName))
	fmt.Fprintf(&b, "rendered config sha256: %s\n", r.hash)
	if st.role == "controlplane" {
		b.WriteString(c.snapshotPlanLine())
	}
	pl := planned{Nodes: map[string]string{}, Rendered: r.hash}
	for _, n := range ns {
		if cur, err := n.currentConfig(ctx); err == nil {
			if cfg, err := loadConfig(cur); err == nil {
				pl.Nodes[n.name] = hashConfig(cfg)
				diags = append(diags, crossingWarnings(n.name, cfg, r.cfg)...)
			}
		}
		// A dry run in TRY mode: it says whether the change can be applied
		// without a reboot, and (unlike other modes on Talos 1.13) it does
		// not cancel a TRY that may be pending.
		m, err := n.apply(ctx, r.bytes, machineapi.ApplyConfigurationRequest_TRY, true, 0)
		if err != nil && needsReboot(err) && st.mode != machineapi.ApplyConfigurationRequest_NO_REBOOT {
			fmt.Fprintf(&b, "node %s: the change needs a reboot; mode = %q allows it (no TRY is possible, verify runs after the reboot)\n", n.name, st.modeName)
			m, err = n.apply(ctx, r.bytes, st.mode, true, 0)
		}
		if err != nil {
			diags = append(diags, c.applyRefused(n, st, err)...)
			continue
		}
		diff := configDiff(m.GetModeDetails())
		fmt.Fprintf(&b, "node %s: config diff (the node's dry run, secrets redacted):\n%s\n", n.name, indent(diff))
	}
	return withNode(sdk.Plan[planned]{Diff: b.String(), Private: pl, Diagnostics: diags}, r)
}

// applyRefused explains a refused apply.
func (c *call) applyRefused(n node, st mcStep, err error) phases.Diagnostics {
	if needsReboot(err) {
		return phases.Errorf("Change Needs A Reboot", "Node %s cannot apply the machine config of %s without a reboot, and mode = %q does not allow one. Set mode = \"auto\" (reboot only if needed) or \"reboot\" to allow it. The node said: %v", n.name, c.addr, st.modeName, err)
	}
	return phases.Errorf("Machine Config Refused", "Node %s refused the machine config of %s: %v", n.name, c.addr, err)
}

func needsReboot(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "can't be applied in immediate mode") || strings.Contains(err.Error(), "requires a reboot"))
}

// configDiff extracts the "Config diff:" section of a dry run's details.
func configDiff(details string) string {
	if _, d, ok := strings.Cut(details, "Config diff:"); ok {
		d = strings.Trim(d, "\n")
		if strings.TrimSpace(d) == "" {
			return "No changes."
		}
		return d
	}
	return strings.TrimSpace(details)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// machineConfigRevert is the Data of a machine config revert data: each node's
// previous config, age-encrypted (it holds the cluster's secrets).
type machineConfigRevert struct {
	Recipient string                `json:"recipient"`
	Nodes     map[string]prevConfig `json:"nodes"`
	// EtcdSnapshots are those taken before the change, by node
	// (etcdsnapshot.go): the revert restores a node's etcd that is lost.
	EtcdSnapshots map[string]etcdSnapshot `json:"etcd_snapshots,omitempty"`
}

type prevConfig struct {
	SHA256 string `json:"sha256"`
	Config string `json:"config_age"`
}

type mcApply = sdk.Apply[planned, machineConfigRevert]

func applyMachineConfig(ctx context.Context, sc *handle, a mcAttrs, pl planned, prior *mcPrior) mcApply {
	c := newCall(sc)
	st, _, diags := decodeMachineConfig(c, a)
	if diags.HasErrors() {
		return mcApply{Diagnostics: diags}
	}
	r, diags := c.render(st.role, st.patches)
	if diags.HasErrors() {
		return mcApply{Diagnostics: diags}
	}
	if st.rendered != "" { // only here: plan has no side effects
		if err := writePrivate(c.s.abs(st.rendered), c.renderedFile(st, r)); err != nil {
			return mcApply{Diagnostics: phases.Errorf("Cannot Write Rendered Config", "Writing the rendered config of %s: %v.", c.addr, err)}
		}
	}
	if pl.Nocloud {
		return c.applyNocloud(ctx, st, r, prior != nil)
	}
	if len(pl.FirstInstall) > 0 {
		// Planned as a first install: its VM may still be booting.
		if r := c.awaitBoot(ctx, st.boot); r != nil {
			return *r
		}
	}
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return mcApply{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	if d := c.p.guard(ctx, c, ns); d.HasErrors() {
		if m := maintenanceNodes(ctx, ns); len(m) > 0 && len(m) == len(ns) {
			if prior != nil {
				return mcApply{Diagnostics: c.installedInMaintenance(m[0].name)}
			}
			if st.nocloud {
				return mcApply{Diagnostics: c.nocloudInMaintenance(m[0].name)}
			}
			if pl.Rendered != "" && len(pl.FirstInstall) == 0 {
				return mcApply{Diagnostics: phases.Errorf("Node Changed Since Plan", "Node %s is in maintenance mode, but the plan of %s did not say it installs it (the node was reset or booted from the ISO since): make a new plan.", m[0].name, c.addr)}
			}
			return c.firstInstall(ctx, st, r, ns)
		}
		return mcApply{Diagnostics: d}
	}
	if prior != nil && prior.Revert != nil {
		if d := c.refuseOnLostEtcd(ctx, prior.Revert.Data.EtcdSnapshots); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
	}
	inv := machineConfigRevert{Nodes: map[string]prevConfig{}, EtcdSnapshots: map[string]etcdSnapshot{}}
	for _, n := range ns {
		prev, err := n.currentConfig(ctx)
		if err != nil {
			c.captureDmesg(ctx, n)
			return mcApply{Diagnostics: phases.Errorf("Cannot Read Current Config", "Reading the current machine config of node %s (kept for rollback) failed: %v.", n.name, err)}
		}
		prevHash := ""
		if cfg, err := loadConfig(prev); err == nil {
			prevHash = hashConfig(cfg)
		}
		if want, ok := pl.Nodes[n.name]; ok && want != prevHash {
			return mcApply{Diagnostics: phases.Errorf("Node Changed Since Plan", "The machine config of node %s changed since the plan was made (someone applied another config): make a new plan to see the real diff.", n.name)}
		}
		inv.Nodes[n.name] = prevConfig{SHA256: prevHash, Config: string(prev)}
		snap, d := c.snapshotBefore(ctx, n)
		if d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
		if snap != nil {
			inv.EtcdSnapshots[n.name] = *snap
		}
		if d := c.intendConfig(inv, n.name); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
		if d := c.ladder(ctx, n, r.bytes, st); d.HasErrors() {
			return mcApply{Diagnostics: d}
		}
	}
	out := outputsOf(r)
	return mcApply{Outputs: out, Revert: c.sealRevert(inv)}
}

// intendConfig saves in the step's record, before node's config changes,
// the previous configs read so far (sealed as the returned revert data):
// a run killed during the ladder, or before its Apply returned, leaves a
// record that rollback undoes. With no recipient there is no revert data
// to save (sealRevert says why at the end).
func (c *call) intendConfig(inv machineConfigRevert, node string) phases.Diagnostics {
	if c.s.recipient == nil {
		return nil
	}
	rd := c.sealRevert(inv)
	if rd == nil {
		return nil // logged
	}
	if err := sdk.Intend(c.Call, rd); err != nil {
		return phases.Errorf("Cannot Record The Previous Config", "%s: the previous config of node %s (to re-apply it on rollback) could not be recorded in the state before the change (%v); node %s was not changed.", c.addr, node, err, node)
	}
	return nil
}

// sealRevert encrypts the previous configs to the age recipient; with no
// recipient there is no revert data, and the log says why. inv is left
// as it is.
func (c *call) sealRevert(inv machineConfigRevert) *sdk.RevertData[machineConfigRevert] {
	inv.Nodes, inv.EtcdSnapshots = maps.Clone(inv.Nodes), maps.Clone(inv.EtcdSnapshots)
	if c.s.recipient == nil {
		c.log.Printf("no rollback for %s: the previous config holds the cluster's secrets and is kept only age-encrypted, but %s; set age_identity or %s to make this step reversible", c.addr, c.s.noKeyWhy, IdentityEnv)
		return nil
	}
	if rs, ok := c.s.recipient.(fmt.Stringer); ok {
		inv.Recipient = rs.String()
	}
	for name, pc := range inv.Nodes {
		sealed, err := encrypt([]byte(pc.Config), c.s.recipient)
		if err != nil {
			c.log.Printf("no rollback for %s: encrypting the previous config failed: %v", c.addr, err)
			return nil
		}
		pc.Config = sealed
		inv.Nodes[name] = pc
	}
	names := make([]string, 0, len(inv.Nodes))
	for n := range inv.Nodes {
		names = append(names, n)
	}
	return &sdk.RevertData[machineConfigRevert]{
		Description: fmt.Sprintf("re-apply the previous machine config of %s (age-encrypted in state) through TRY, the checks and the permanent apply", strings.Join(sortStrings(names), ", ")) + snapshotNote(inv.EtcdSnapshots),
		Data:        inv,
	}
}

// ladder is the safe change: TRY with a timeout, the checks while it is
// pending, then the permanent apply before the TRY expires. A failed check
// confirms nothing: the node reverts by itself.
func (c *call) ladder(ctx context.Context, n node, data []byte, st mcStep) phases.Diagnostics {
	start := time.Now()
	deadline := start.Add(st.try)
	c.log.Printf("node %s: applying in TRY mode for %s (reverts by itself at %s unless confirmed)", n.name, st.try, deadline.Format(time.RFC3339))
	m, err := n.apply(ctx, data, machineapi.ApplyConfigurationRequest_TRY, false, st.try)
	if err != nil {
		if needsReboot(err) && st.mode != machineapi.ApplyConfigurationRequest_NO_REBOOT {
			return c.rebootApply(ctx, n, data, st)
		}
		c.captureDmesg(ctx, n)
		if ctx.Err() != nil {
			return phases.Errorf("Step Interrupted", "%s was stopped while sending the TRY to node %s: %v. If the node took it, it reverts by itself at %s.", c.addr, n.name, ctx.Err(), deadline.Format(time.RFC3339))
		}
		return c.applyRefused(n, st, err)
	}
	c.log.Printf("node %s: %s", n.name, firstLine(m.GetModeDetails()))
	margin := min(st.try/5, 5*time.Second)
	checkCtx, cancel := context.WithDeadline(ctx, deadline.Add(-margin))
	defer cancel()
	if err := c.verify(checkCtx, n, st.verify); err != nil {
		c.captureDmesg(ctx, n)
		if ctx.Err() != nil {
			return phases.Errorf("Step Interrupted", "%s was stopped while checking the TRY on node %s: %v. The TRY was not confirmed: the node reverts to its previous config by itself at %s.", c.addr, n.name, ctx.Err(), deadline.Format(time.RFC3339))
		}
		return phases.Errorf("Verify Failed", "A check of %s failed while the TRY was pending on node %s: %v. The TRY was not confirmed: the node reverts to its previous config by itself at %s. The dmesg tail is in the step's log.", c.addr, n.name, err, deadline.Format(time.RFC3339))
	}
	if ctx.Err() != nil {
		return phases.Errorf("Step Interrupted", "%s was stopped before confirming the TRY on node %s: the node reverts to its previous config by itself at %s.", c.addr, n.name, deadline.Format(time.RFC3339))
	}
	if time.Now().After(deadline.Add(-margin / 2)) {
		return phases.Errorf("TRY Expired", "The checks of %s on node %s took until the TRY was about to expire (%s); nothing was confirmed and the node reverts by itself. Raise try_timeout.", c.addr, n.name, deadline.Format(time.RFC3339))
	}
	c.log.Printf("node %s: checks passed (%s); confirming with %s", n.name, st.verify, st.modeName)
	m, err = n.apply(ctx, data, st.mode, false, 0)
	if err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Confirm Failed", "Node %s refused the permanent apply of %s after the TRY passed its checks: %v. The TRY reverts by itself at %s.", n.name, c.addr, err, deadline.Format(time.RFC3339))
	}
	c.log.Printf("node %s: %s", n.name, firstLine(m.GetModeDetails()))
	if m.GetMode() == machineapi.ApplyConfigurationRequest_REBOOT {
		if err := waitVersion(ctx, n, ""); err != nil {
			c.captureDmesg(ctx, n)
			return phases.Errorf("Node Did Not Come Back", "Node %s did not answer after the reboot of %s: %v.", n.name, c.addr, err)
		}
	}
	return nil
}

// rebootApply is the ladder of a change that needs a reboot, which TRY
// cannot do: apply with the allowed mode, wait for the node, then check.
func (c *call) rebootApply(ctx context.Context, n node, data []byte, st mcStep) phases.Diagnostics {
	c.log.Printf("node %s: the change needs a reboot, which TRY cannot do; mode = %q allows it: applying without a TRY", n.name, st.modeName)
	m, err := n.apply(ctx, data, st.mode, false, 0)
	if err != nil {
		c.captureDmesg(ctx, n)
		return c.applyRefused(n, st, err)
	}
	c.log.Printf("node %s: %s", n.name, firstLine(m.GetModeDetails()))
	if err := waitVersion(ctx, n, ""); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Node Did Not Come Back", "Node %s did not answer after the reboot of %s: %v.", n.name, c.addr, err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.verify(checkCtx, n, st.verify); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Verify Failed", "A check of %s failed after node %s rebooted into the new config: %v. Without a TRY nothing reverts by itself: roll back to re-apply the previous config.", c.addr, n.name, err)
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func readMachineConfig(ctx context.Context, sc *handle, a mcAttrs, prior *mcPrior) sdk.Read[machineConfigRevert] {
	c := newCall(sc)
	p := c.p
	if sc.InFlight {
		// A record left running: with no prior, or with the revert
		// data its Apply saved before changing a node (intendConfig).
		c.awaitInFlight(ctx)
	}
	if prior == nil {
		// Never recorded: a run may have stopped during a TRY (the
		// persisted config is still the old one), or while a first
		// install rebooted. Only a node that persisted exactly this
		// config is Present; else re-running the ladder is idempotent.
		if out, ok := c.persistedAsRendered(ctx, a); ok {
			return sdk.Read[machineConfigRevert]{Observation: providers.Present, Outputs: out, Detail: "never recorded as applied, but every node runs this config (a run stopped after applying it, e.g. during a first install's reboot)"}
		}
		return sdk.Read[machineConfigRevert]{Observation: providers.Absent, Detail: "never recorded as applied; the ladder runs (again)"}
	}
	st, known, diags := decodeMachineConfig(c, a)
	if diags.HasErrors() || !known {
		return sdk.Read[machineConfigRevert]{Observation: providers.Unknown, Diagnostics: diags}
	}
	r, diags := c.render(st.role, st.patches)
	if diags.HasErrors() {
		return sdk.Read[machineConfigRevert]{Observation: providers.Unknown, Diagnostics: diags}
	}
	if st.nocloud && prior.Private.Nocloud && !c.answersSoon(ctx) {
		return c.readBeforeTheNode(r, prior.Private)
	}
	ns, err := p.nodes(ctx)
	if err != nil {
		return sdk.Read[machineConfigRevert]{Diagnostics: phases.FromError("Cannot Reach Talos", err)}
	}
	var drift []string
	for _, n := range ns {
		cur, err := n.currentConfig(ctx)
		if err != nil && inMaintenance(ctx, n.name) {
			return sdk.Read[machineConfigRevert]{Diagnostics: c.installedInMaintenance(n.name)}
		}
		if silent(err) {
			return c.readWhenItAnswers(n, err)
		}
		if err != nil {
			return sdk.Read[machineConfigRevert]{Diagnostics: phases.Errorf("Cannot Read Current Config", "Reading the machine config of node %s failed: %v.", n.name, err)}
		}
		cfg, err := loadConfig(cur)
		if err != nil {
			drift = append(drift, fmt.Sprintf("node %s: its config cannot be loaded: %v", n.name, err))
			continue
		}
		if hashConfig(cfg) != r.hash {
			d, _ := configdiff.DiffConfigs(cfg, r.cfg)
			drift = append(drift, fmt.Sprintf("node %s: its machine config differs from the rendered one (secrets redacted):\n%s", n.name, indent(d)))
		}
	}
	if prior.Revert != nil {
		// Before a rollback, this note is its plan's line: the snapshot
		// it will restore.
		drift = append(drift, c.lostEtcdNotes(ctx, prior.Revert.Data.EtcdSnapshots)...)
	}
	if len(drift) > 0 {
		return sdk.Read[machineConfigRevert]{Observation: providers.Drifted, Detail: strings.Join(drift, "\n")}
	}
	out := outputsOf(r)
	if st.nocloud {
		// The state keeps user_data redacted; the engine reads it back
		// here for the VM step that refers to it.
		c.userData(&out, r)
	}
	return sdk.Read[machineConfigRevert]{Observation: providers.Present, Outputs: out}
}

// inFlightWait bounds how long a read of a step found in flight waits for
// its nodes to answer again: as long as the first run would have waited
// for the install's reboot (waitVersion).
const inFlightWait = 10 * time.Minute

// maintenanceSettle is how long a node found in flight must stay in
// maintenance mode to count as not installing: right after it took its
// first config, its maintenance service still answers for a moment before
// the install stops it.
const maintenanceSettle = 5 * time.Second

// awaitInFlight waits, as the step's first run would have, until every
// node answers over mTLS, or has stayed in maintenance mode for
// maintenanceSettle (the config was never sent, or the install failed): a
// run stopped while a first install (or a config that needs one)
// rebooted the node leaves it silent for minutes, and reading it then
// would take "not answering yet" for "not done", and applying it would
// fail at once. It gives up at inFlightWait or when ctx ends; the read
// then says what it finds, and the apply why it cannot reach the node.
func (c *call) awaitInFlight(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, inFlightWait)
	defer cancel()
	backoff, logged := 250*time.Millisecond, false
	since := map[string]time.Time{} // when each node was first seen in maintenance mode, in a row
	for {
		waiting := c.unsettledNodes(ctx, since)
		if len(waiting) == 0 {
			return
		}
		if !logged {
			c.log.Printf("a run stopped while %s was applied: waiting for %s to answer (an install or a reboot may be under way)", c.addr, strings.Join(waiting, ", "))
			logged = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// unsettledNodes lists the nodes that do not answer over mTLS and have
// not stayed in maintenance mode for maintenanceSettle.
func (c *call) unsettledNodes(ctx context.Context, since map[string]time.Time) []string {
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return c.p.targets()
	}
	var waiting []string
	for _, n := range ns {
		if _, err := n.version(ctx); err == nil {
			continue
		}
		if !inMaintenance(ctx, n.name) {
			delete(since, n.name)
			waiting = append(waiting, n.name)
			continue
		}
		if first, ok := since[n.name]; !ok {
			since[n.name] = time.Now()
		} else if time.Since(first) >= maintenanceSettle {
			continue
		}
		waiting = append(waiting, n.name)
	}
	if len(waiting) > 0 {
		_ = c.p.close() // a client made before the reboot may hold a dead connection: dial anew
	}
	return waiting
}

// persistedAsRendered says whether every node answers over mTLS and has
// persisted the config the step renders now.
func (c *call) persistedAsRendered(ctx context.Context, a mcAttrs) (mcOutputs, bool) {
	st, known, diags := decodeMachineConfig(c, a)
	if diags.HasErrors() || !known {
		return mcOutputs{}, false
	}
	r, diags := c.render(st.role, st.patches)
	if diags.HasErrors() {
		return mcOutputs{}, false
	}
	ns, err := c.p.nodes(ctx)
	if err != nil || len(ns) == 0 {
		return mcOutputs{}, false
	}
	for _, n := range ns {
		cur, err := n.currentConfig(ctx)
		if err != nil {
			return mcOutputs{}, false
		}
		cfg, err := loadConfig(cur)
		if err != nil || hashConfig(cfg) != r.hash {
			return mcOutputs{}, false
		}
	}
	return outputsOf(r), true
}

func revertMachineConfig(ctx context.Context, sc *handle, a mcAttrs, u sdk.Applied[machineConfigRevert]) phases.Diagnostics {
	c, inv := newCall(sc), u.Data
	if len(inv.Nodes) == 0 {
		return phases.Errorf("Invalid Revert", "The recorded revert data of %s holds no previous config.", c.addr)
	}
	if c.s.identity == nil {
		return phases.Errorf("No Age Identity", "Rolling back %s needs the age identity of recipient %s to decrypt the previous config: set age_identity or %s.", c.addr, inv.Recipient, IdentityEnv)
	}
	st, _, _ := decodeMachineConfig(c, a) // the step's settings only tune the ladder here
	if st.try == 0 {
		st.try = time.Minute
	}
	if st.modeName == "" || (st.mode == machineapi.ApplyConfigurationRequest_REBOOT && rebootModeRemoved(c.s.version)) {
		// A release without REBOOT (1.14) confirms the old config as any other.
		st.mode, st.modeName = machineapi.ApplyConfigurationRequest_NO_REBOOT, "no-reboot"
	}
	ns, d := c.guarded(ctx)
	if d.HasErrors() {
		return d
	}
	for _, n := range ns {
		pc, ok := inv.Nodes[n.name]
		if !ok {
			continue
		}
		prev, err := agefile.Decrypt([]byte(pc.Config), c.s.identity)
		if err != nil {
			return phases.Errorf("Cannot Decrypt Previous Config", "The previous config of node %s cannot be decrypted with the configured age identity: %v.", n.name, err)
		}
		if snap, ok := inv.EtcdSnapshots[n.name]; ok {
			if d := c.restoreIfLost(ctx, n, snap); d.HasErrors() {
				return d
			}
		}
		c.log.Printf("node %s: re-applying the previous machine config (sha256 %s)", n.name, pc.SHA256)
		if d := c.ladder(ctx, n, prev, st); d.HasErrors() {
			return d
		}
	}
	return nil
}

// writePrivate writes a file only its owner can read, making directories.
// renderedFile is what the rendered attribute's file gets: the config as
// sent, or by default with its secrets redacted, field by field by the
// machinery, then by the scrubber for any key it does not know.
func (c *call) renderedFile(st mcStep, r *rendered) []byte {
	if st.withSecrets {
		return r.bytes
	}
	b, err := r.cfg.RedactSecrets(phases.Redacted).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		b = r.bytes
	}
	return []byte(c.s.scrub.Text(string(b)))
}

func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
