package talosschema

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "talos"

// Step type names.
const (
	MachineConfig = "talos_machine_config"
	Bootstrap     = "talos_bootstrap"
	Kubeconfig    = "talos_kubeconfig"
	Read          = "talos_read"
	ServiceHealth = "talos_service_health"
	Upgrade       = "talos_upgrade"
)

// VerifyType is the type of the verify attribute of talos_machine_config.
var VerifyType = cty.ObjectWithOptionalAttrs(map[string]cty.Type{
	"services":   cty.List(cty.String),
	"files":      cty.Map(cty.String),
	"kubernetes": cty.Bool,
}, []string{"services", "files", "kubernetes"})

// Schema describes the provider block and the step types.
var Schema = phases.Schema{
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
		MachineConfig: {
			Description: "Renders the machine config (secrets bundle + patches, pinned version), validates it, shows the node's dry-run diff, then applies it with TRY, the verify checks and the permanent apply.",
			Attributes: map[string]phases.Attribute{
				"role":        {Type: cty.String, Description: "\"controlplane\" (default) or \"worker\"."},
				"patches":     {Type: cty.List(cty.String), Description: "Patch files (strategic merge, multi-document, or JSON patches), relative to the runbook."},
				"mode":        {Type: cty.String, Description: "\"no-reboot\" (default), \"auto\" or \"reboot\": what the permanent apply may do."},
				"try_timeout": {Type: cty.String, Description: "How long the TRY stays before the node reverts it by itself, \"1m\" by default."},
				"verify":      {Type: VerifyType, Description: "Checks run while the TRY is pending: services (healthy), files (path -> content, read through the API), kubernetes (the API answers)."},
				"rendered":    {Type: cty.String, Description: "Write the rendered config here (mode 0600) for review."},
			},
			Outputs: map[string]cty.Type{"config_hash": cty.String, "installer_image": cty.String},
		},
		Bootstrap: {
			Description: "Bootstraps etcd on the node, once; a node already bootstrapped counts as done. Cannot be undone.",
			Attributes:  map[string]phases.Attribute{},
		},
		Kubeconfig: {
			Description: "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps.",
			Attributes: map[string]phases.Attribute{
				"path": {Type: cty.String, Required: true, Description: "Where to write the kubeconfig, relative to the runbook."},
			},
			Outputs: map[string]cty.Type{"path": cty.String},
		},
		Read: {
			Description: "Reads a file through the Talos API and compares its content.",
			Attributes: map[string]phases.Attribute{
				"path":     {Type: cty.String, Required: true, Description: "The file on the node, such as /var/mnt/data/.probe."},
				"expect":   {Type: cty.String, Description: "The exact content expected, compared with surrounding whitespace trimmed."},
				"contains": {Type: cty.String, Description: "A string the content must contain."},
			},
			CanCheck: true,
		},
		ServiceHealth: {
			Description: "Checks that Talos services are running and healthy.",
			Attributes: map[string]phases.Attribute{
				"services": {Type: cty.List(cty.String), Required: true, Description: "Service IDs, such as [\"etcd\", \"kubelet\"]."},
			},
			CanCheck: true,
		},
		Upgrade: {
			Description: "Upgrades Talos to a target version with the Image Factory installer of the schematic, and waits until the node runs it.",
			Attributes: map[string]phases.Attribute{
				"version":  {Type: cty.String, Required: true, Description: "The target Talos version, such as \"v1.13.3\"."},
				"preserve": {Type: cty.Bool, Description: "Keep the ephemeral partition's data."},
			},
			Outputs: map[string]cty.Type{"version": cty.String, "image": cty.String},
		},
	},
}
