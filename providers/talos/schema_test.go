package talos_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// TestSchemaUnchanged: the schema derived from the attribute structs, as
// the provider serves it and as migrate compiles it in, is the one
// written by hand before the SDK, field by field.
func TestSchemaUnchanged(t *testing.T) {
	for what, got := range map[string]phases.Schema{"provider": talos.New().Schema(), "talosschema": talosschema.Schema} {
		providertest.SameAttributes(t, what+" provider block", got.Provider.Attributes, schema.Provider.Attributes)
		if len(got.StepTypes) != len(schema.StepTypes) {
			t.Fatalf("%s: %d step types, want %d", what, len(got.StepTypes), len(schema.StepTypes))
		}
		for name, want := range schema.StepTypes {
			g, ok := got.StepTypes[name]
			if !ok {
				t.Errorf("%s: step type %s is missing", what, name)
			}
			providertest.SameStepType(t, what+" "+name, g, want)
			if (g.Attributes == nil) != (want.Attributes == nil) {
				t.Errorf("%s: %s attributes nil = %v, want %v", what, name, g.Attributes == nil, want.Attributes == nil)
			}
			if (g.Outputs == nil) != (want.Outputs == nil) {
				t.Errorf("%s: %s outputs nil = %v, want %v", what, name, g.Outputs == nil, want.Outputs == nil)
			}
		}
	}
}

// VerifyType is the type of the verify attribute of talos_machine_config.
var verifyType = cty.ObjectWithOptionalAttrs(map[string]cty.Type{
	"services":   cty.List(cty.String),
	"files":      cty.Map(cty.String),
	"kubernetes": cty.Bool,
}, []string{"services", "files", "kubernetes"})

// schema is the literal written by hand before the SDK, word for word.
var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{
		"endpoints":          {Type: cty.List(cty.String), Description: "Talos API endpoints (host or host:port); default the talosconfig context's."},
		"nodes":              {Type: cty.List(cty.String), Description: "Nodes to act on; default the context's nodes, else the endpoints."},
		"talosconfig":        {Type: cty.String, Description: "Path to the talosconfig, relative to the runbook; may be age-encrypted. Default $TALOSCONFIG or ~/.talos/config."},
		"context":            {Type: cty.String, Description: "The talosconfig context; default its current context."},
		"version":            {Type: cty.String, Required: true, Description: "The Talos version the cluster runs, such as \"v1.13.3\": configs are rendered for it and steps refuse a node running another."},
		"kubernetes_version": {Type: cty.String, Description: "The Kubernetes version; default machinery's default."},
		"cluster_name":       {Type: cty.String, Description: "The cluster name; default the talosconfig context's cluster, else \"talos\"."},
		"cluster_endpoint":   {Type: cty.String, Description: "The Kubernetes API endpoint, https://IP:6443; default the first endpoint on port 6443."},
		"secrets":            {Type: cty.String, Description: "Path to the secrets bundle YAML (talosctl gen secrets), relative to the runbook; may be age-encrypted."},
		"install_disk":       {Type: cty.String, Description: "The install disk, \"/dev/sda\" by default."},
		"schematic":          {Type: cty.String, Description: "An Image Factory schematic as YAML; the installer image is factory.talos.dev/metal-installer/<its ID>:<version>."},
		"extensions":         {Type: cty.List(cty.String), Description: "Official system extensions (such as \"siderolabs/i915\") making the schematic, instead of schematic."},
		"age_identity":       {Type: cty.String, Description: "Path to an age identity file; default $MIGRATE_AGE_IDENTITY (an identity or a path)."},
	}},
	StepTypes: map[string]phases.StepType{
		talos.MachineConfig: {
			Description: "Renders the machine config (secrets bundle + patches, pinned version), validates it, shows the node's dry-run diff, then applies it with TRY, the verify checks and the permanent apply.",
			Attributes: map[string]phases.Attribute{
				"role":             {Type: cty.String, Description: "\"controlplane\" (default) or \"worker\"."},
				"patches":          {Type: cty.List(cty.String), Description: "Patch files (strategic merge, multi-document, or JSON patches), relative to the runbook."},
				"mode":             {Type: cty.String, Description: "\"no-reboot\" (default), \"auto\" or \"reboot\": what the permanent apply may do."},
				"try_timeout":      {Type: cty.String, Description: "How long the TRY stays before the node reverts it by itself, \"1m\" by default."},
				"verify":           {Type: verifyType, Description: "Checks run while the TRY is pending: services (healthy), files (path -> content, read through the API), kubernetes (the API answers)."},
				"rendered":         {Type: cty.String, Description: "Write the rendered config here (mode 0600) for review, during run only (plan writes nothing)."},
				"rendered_secrets": {Type: cty.String, Description: "\"redact\" (default): the rendered file has its keys, tokens and secrets redacted; \"include\": written as sent to the node."},
			},
			Outputs: map[string]cty.Type{"config_hash": cty.String, "installer_image": cty.String},
		},
		talos.Bootstrap: {
			Description: "Bootstraps etcd on the node, once; a node already bootstrapped counts as done. Cannot be undone.",
			Attributes:  map[string]phases.Attribute{},
		},
		talos.Kubeconfig: {
			Description: "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps.",
			Attributes: map[string]phases.Attribute{
				"path": {Type: cty.String, Required: true, Description: "Where to write the kubeconfig, relative to the runbook."},
			},
			Outputs: map[string]cty.Type{"path": cty.String},
		},
		talos.Read: {
			Description: "Reads a file through the Talos API and compares its content.",
			Attributes: map[string]phases.Attribute{
				"path":          {Type: cty.String, Required: true, Description: "The file on the node, such as /var/mnt/data/.probe."},
				"expect":        {Type: cty.String, Description: "The exact content expected, compared with surrounding whitespace trimmed."},
				"contains":      {Type: cty.String, Description: "A string the content must contain."},
				"error_message": {Type: cty.String, Description: "What a failure means, said to a person (\"no iGPU: ...\"): the failure starts with it, then says what was read."},
			},
			CanCheck: true,
		},
		talos.ServiceHealth: {
			Description: "Checks that Talos services are running and healthy.",
			Attributes: map[string]phases.Attribute{
				"services": {Type: cty.List(cty.String), Required: true, Description: "Service IDs, such as [\"etcd\", \"kubelet\"]."},
			},
			CanCheck: true,
		},
		talos.Upgrade: {
			Description: "Upgrades Talos to a target version with the Image Factory installer of the schematic, and waits until the node runs it.",
			Attributes: map[string]phases.Attribute{
				"version":  {Type: cty.String, Required: true, Description: "The target Talos version, such as \"v1.13.3\"."},
				"preserve": {Type: cty.Bool, Description: "Keep the ephemeral partition's data."},
			},
			Outputs: map[string]cty.Type{"version": cty.String, "image": cty.String},
		},
	},
}
