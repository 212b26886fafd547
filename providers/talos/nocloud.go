package talos

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret"
)

// The first install through the Incus host's API (first_install =
// "nocloud"). Talos' nocloud platform reads the machine config from the
// user-data of a volume labelled cidata before it would start the
// maintenance API; Incus writes that volume (config.iso, label cidata)
// from the instance's cloud-init.user-data when a VM with a disk of
// source cloud-init:config starts. So the config with the cluster's keys
// goes from migrate to the host over the host's authenticated API (its
// client certificate, or its unix socket) and from the host to the VM as
// a local drive: no unauthenticated TLS on the LAN, and no MAC to trust.
//
// The step renders and validates the config and gives it as user_data
// (sensitive: redacted in the state and the terminal); the VM's
// incus_instance step takes it before the VM first boots. A later step
// proves the install: the node answering on its authenticated API (mTLS
// with the cluster's client certificate; talos_service_health), after
// which the key and the drive are removed from the instance.

const (
	firstInstallMaintenance = "maintenance"
	firstInstallNocloud     = "nocloud"
)

// planNocloud is the plan of a first install through the Incus host's
// API: what the VM will carry, and that nothing is sent to the node.
func (c *call) planNocloud(st mcStep, r *rendered) sdk.Plan[planned] {
	var b strings.Builder
	b.WriteString("install: first config through the Incus host's API (first_install = \"nocloud\"): nothing is sent over the LAN\n")
	fmt.Fprintf(&b, "the config is the step's user_data output (sensitive, known after apply): the VM's incus_instance step puts it in the instance's cloud-init.user-data with a disk of source cloud-init:config before the VM first boots; Incus writes it on the VM's config drive (label cidata), and the node at %s, booted from a nocloud image, installs from it before any maintenance mode\n", c.endpoints())
	b.WriteString(c.s.installDiskLine(nil, "the node evaluates it against its disks at install (its VM is made by a later step: no node answers to check it at plan)"))
	b.WriteString(c.s.schematicLine(r.image))
	fmt.Fprintf(&b, "machine config (%s) rendered for Talos %s, Kubernetes %s: %s\n", st.role, c.s.version, c.s.k8sVersion, configSummary(r.cfg))
	if len(st.patches) > 0 {
		fmt.Fprintf(&b, "patches: %s\n", strings.Join(st.patches, ", "))
	}
	fmt.Fprintf(&b, "rendered config sha256: %s\n", r.hash)
	b.WriteString("then: the install is proven by the node answering on its authenticated API (mTLS with the cluster's client certificate), and the key is removed from the instance's config and the drive detached")
	return sdk.Plan[planned]{Diff: b.String(), Private: planned{Nodes: map[string]string{}, Rendered: r.hash, Nocloud: true},
		Irreversible: "a first install writes Talos to the install disk of the VM; rollback cannot undo it (that takes a wipe)"}
}

// applyNocloud gives the config as user_data and sends nothing: the node
// must not answer yet (its VM is made by a later step). One that answers
// in maintenance mode is refused; one installed since the plan too.
func (c *call) applyNocloud(ctx context.Context, st mcStep, r *rendered, installed bool) mcApply {
	if !installed && c.answersSoon(ctx) {
		for _, addr := range c.p.targets() {
			if inMaintenance(ctx, addr) {
				return mcApply{Diagnostics: c.nocloudInMaintenance(addr)}
			}
		}
		return mcApply{Diagnostics: phases.Errorf("Node Changed Since Plan", "The plan of %s said no node answers at %s yet (its VM is made by a later step, with the config on its config drive), but one answers now: make a new plan. Nothing was sent.", c.addr, c.endpoints())}
	}
	c.log.Printf("%s: the first config (sha256 %s, installer %s, install disk %s) is the user_data output, for the VM's cloud-init.user-data through the Incus host's API; nothing is sent over the LAN", c.addr, r.hash, r.image, c.s.install)
	out := outputsOf(r)
	c.userData(&out, r)
	return mcApply{Outputs: out, Private: planned{Nodes: map[string]string{}, Rendered: r.hash, Nocloud: true}}
}

// readBeforeTheNode reads a first install given as user_data while no
// node answers at the address: its VM is made by a later step (a run
// stopped between them) or still boots. The record holds while the config
// renders as it did, and the VM step gets its user_data back; another
// rendering is given again.
func (c *call) readBeforeTheNode(r *rendered, was planned) sdk.Read[machineConfigRevert] {
	if r.hash != was.Rendered {
		return sdk.Read[machineConfigRevert]{Observation: providers.Drifted, Detail: fmt.Sprintf("no node answers at %s yet, and the config now renders otherwise (sha256 %s) than the user_data given (sha256 %s): it is given again", c.endpoints(), r.hash, was.Rendered)}
	}
	out := outputsOf(r)
	c.userData(&out, r)
	return sdk.Read[machineConfigRevert]{Observation: providers.Present, Outputs: out,
		Detail: fmt.Sprintf("no node answers at %s yet: the user_data given (sha256 %s) waits for its VM", c.endpoints(), r.hash)}
}

// nocloudInMaintenance refuses a node in maintenance mode where the
// config was to go through the host: the VM booted without its drive,
// from a metal image, or its config did not validate; or another machine
// answers there.
func (c *call) nocloudInMaintenance(addr string) phases.Diagnostics {
	return phases.Errorf("Node In Maintenance Mode",
		"%s installs through the Incus host's API (first_install = \"nocloud\"), but the machine at %s answers in maintenance mode, waiting for a config over the LAN. It cannot prove who it is, and the config carries the cluster's keys: Nothing is sent. "+
			"If it is the VM: it booted a metal image instead of a nocloud one, without its cloud-init:config disk, or its config did not validate (its console in incus console says which). If the VM is not running yet, another machine of the LAN holds the address: check the router's leases.",
		c.addr, hostOf(addr))
}

// userData is the user_data output of r: the config as sent, with the
// secrets inside it listed (phases.SecretParts), so that scrubbers learn
// its keys and tokens, not the words of every config (the node's name,
// its endpoint), which would redact them wherever they are printed.
func (c *call) userData(out *mcOutputs, r *rendered) {
	out.UserData = string(r.bytes)
	out.userDataParts = c.userDataParts(r)
}

// userDataParts are the secrets of r's config: every value the machinery
// redacts (keys, tokens, the secretbox and aescbc secrets, registry
// passwords) or the provider's scrubber does (the bundle's secrets, a
// secret field's value in YAML), found by comparing the config with the
// same config redacted, node by node; with the forms YAML gives them in
// the text (partForms). nil when the two do not line up (a redaction
// that changed the document's shape): the config is then learned word by
// word, as any other secret, at the cost of redacting its ordinary words
// too.
func (c *call) userDataParts(r *rendered) []string {
	red, err := r.cfg.RedactSecrets(phases.Redacted).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil
	}
	full, redacted := yamlDocs(r.bytes), yamlDocs([]byte(c.s.scrub.Text(string(red))))
	if len(full) == 0 || len(full) != len(redacted) {
		return nil
	}
	var values []string
	for i := range full {
		if !changedScalars(full[i], redacted[i], &values) {
			return nil
		}
	}
	var parts []string
	for _, v := range values {
		parts = append(parts, partForms(v)...)
	}
	return parts
}

// changedScalars adds to out the values of a's scalars that b, the same
// document redacted, has otherwise; false when their shapes differ.
func changedScalars(a, b *yaml.Node, out *[]string) bool {
	if a.Kind != b.Kind || len(a.Content) != len(b.Content) {
		return false
	}
	if a.Kind == yaml.ScalarNode && a.Value != b.Value {
		*out = append(*out, a.Value)
	}
	for i := range a.Content {
		if !changedScalars(a.Content[i], b.Content[i], out) {
			return false
		}
	}
	return true
}

// partForms are a secret value v as the config's text may show it: as
// it is, between YAML's single quotes (a quote doubled), each long line of
// a value of several (a block scalar indents them), and the lines of the
// PEM a key is the base64 of (what base64 -d of it prints).
func partForms(v string) []string {
	out := []string{v}
	if strings.Contains(v, "'") {
		out = append(out, strings.ReplaceAll(v, "'", "''"))
	}
	if strings.Contains(v, "\n") {
		for _, line := range strings.Split(v, "\n") {
			if line = strings.TrimSpace(line); len(line) >= secret.MinPiece {
				out = append(out, line)
			}
		}
	}
	return append(out, pemLines(v)...)
}

// pemLines are the PEM that p is the base64 of, if it is one, and its
// lines: a machine config carries each key so.
func pemLines(p string) []string {
	b, err := base64.StdEncoding.DecodeString(p)
	if err != nil || !strings.Contains(string(b), "-----BEGIN") {
		return nil
	}
	out := []string{strings.TrimSpace(string(b))}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}
