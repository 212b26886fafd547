package talosschema

import (
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "talos"

// GenSecretsArg is the argument that makes the talos program write a new
// secrets bundle to its output instead of serving (migrate secrets gen
// talos): migrate itself does not carry Talos's libraries.
const GenSecretsArg = "gen-secrets"

// Step type names.
const (
	MachineConfig = "talos_machine_config"
	Bootstrap     = "talos_bootstrap"
	Kubeconfig    = "talos_kubeconfig"
	Read          = "talos_read"
	ServiceHealth = "talos_service_health"
	Upgrade       = "talos_upgrade"
)

// ProviderAttrs is the provider block.
type ProviderAttrs struct {
	Endpoints         []string `cty:"endpoints" doc:"Talos API endpoints (host or host:port); default the talosconfig context's."`
	Nodes             []string `cty:"nodes" doc:"Nodes to act on; default the context's nodes, else the endpoints."`
	Talosconfig       string   `cty:"talosconfig" doc:"Path to the talosconfig, relative to the runbook; may be age-encrypted. Default $TALOSCONFIG or ~/.talos/config."`
	Context           string   `cty:"context" doc:"The talosconfig context; default its current context."`
	Version           string   `cty:"version" required:"true" doc:"The Talos version the cluster runs, such as \"v1.13.3\": configs are rendered for it and steps refuse a node running another."`
	KubernetesVersion *string  `cty:"kubernetes_version" doc:"The Kubernetes version; default machinery's default."`
	ClusterName       string   `cty:"cluster_name" doc:"The cluster name; default the talosconfig context's cluster, else \"talos\"."`
	ClusterEndpoint   string   `cty:"cluster_endpoint" doc:"The Kubernetes API endpoint, https://IP:6443; default the first endpoint on port 6443."`
	Secrets           string   `cty:"secrets" doc:"Path to the secrets bundle YAML (talosctl gen secrets), relative to the runbook; may be age-encrypted."`
	InstallDisk       *string  `cty:"install_disk" doc:"The install disk, \"/dev/sda\" by default."`
	Schematic         string   `cty:"schematic" doc:"An Image Factory schematic as YAML; the installer image is factory.talos.dev/metal-installer/<its ID>:<version>."`
	Extensions        []string `cty:"extensions" doc:"Official system extensions (such as \"siderolabs/i915\") making the schematic, instead of schematic."`
	AgeIdentity       string   `cty:"age_identity" doc:"Path to an age identity file; default $MIGRATE_AGE_IDENTITY (an identity or a path)."`
}

// MachineConfigAttrs is a talos_machine_config step. Pointers are the
// attributes with a default (nil: not set).
type MachineConfigAttrs struct {
	Role       *string  `cty:"role" doc:"\"controlplane\" (default) or \"worker\"."`
	Patches    []string `cty:"patches" doc:"Patch files (strategic merge, multi-document, or JSON patches), relative to the runbook."`
	Mode       *string  `cty:"mode" doc:"\"no-reboot\" (default), \"auto\" or \"reboot\": what the permanent apply may do."`
	TryTimeout *string  `cty:"try_timeout" doc:"How long the TRY stays before the node reverts it by itself, \"1m\" by default."`
	Verify     Verify   `cty:"verify" doc:"Checks run while the TRY is pending: services (healthy), files (path -> content, read through the API), kubernetes (the API answers)."`
	Rendered   string   `cty:"rendered" doc:"Write the rendered config here (mode 0600) for review, during run only (plan writes nothing)."`
	// RenderedSecrets: the PKI keys and tokens are redacted from the
	// rendered file unless the user asks for them.
	RenderedSecrets *string `cty:"rendered_secrets" doc:"\"redact\" (default): the rendered file has its keys, tokens and secrets redacted; \"include\": written as sent to the node."`
}

// Verify is what must hold while the TRY is pending.
type Verify struct {
	Services   []string          `cty:"services" optional:"true"`
	Files      map[string]string `cty:"files" optional:"true"`
	Kubernetes bool              `cty:"kubernetes" optional:"true"`
}

// MachineConfigOutputs are a talos_machine_config step's outputs.
type MachineConfigOutputs struct {
	ConfigHash     string `cty:"config_hash"`
	InstallerImage string `cty:"installer_image"`
}

// BootstrapAttrs is a talos_bootstrap step: no attributes.
type BootstrapAttrs struct{}

// KubeconfigAttrs is a talos_kubeconfig step.
type KubeconfigAttrs struct {
	Path string `cty:"path" required:"true" doc:"Where to write the kubeconfig, relative to the runbook."`
}

// KubeconfigOutputs are a talos_kubeconfig step's outputs.
type KubeconfigOutputs struct {
	Path string `cty:"path"`
}

// ReadAttrs is a talos_read step; pointers say whether a check is set.
type ReadAttrs struct {
	Path     string  `cty:"path" required:"true" doc:"The file on the node, such as /var/mnt/data/.probe."`
	Expect   *string `cty:"expect" doc:"The exact content expected, compared with surrounding whitespace trimmed."`
	Contains *string `cty:"contains" doc:"A string the content must contain."`
	// ErrorMessage: a failed check says what it means for the migration.
	ErrorMessage string `cty:"error_message" doc:"What a failure means, said to a person (\"no iGPU: ...\"): the failure starts with it, then says what was read."`
}

// ServiceHealthAttrs is a talos_service_health step.
type ServiceHealthAttrs struct {
	Services []string `cty:"services" required:"true" doc:"Service IDs, such as [\"etcd\", \"kubelet\"]."`
}

// UpgradeAttrs is a talos_upgrade step.
type UpgradeAttrs struct {
	Version  string `cty:"version" required:"true" doc:"The target Talos version, such as \"v1.13.3\"."`
	Preserve bool   `cty:"preserve" doc:"Keep the ephemeral partition's data."`
}

// UpgradeOutputs are a talos_upgrade step's outputs.
type UpgradeOutputs struct {
	Version string `cty:"version"`
	Image   string `cty:"image"`
}

// Descriptions of the step types.
const (
	MachineConfigDoc = "Renders the machine config (secrets bundle + patches, pinned version), validates it, shows the node's dry-run diff, then applies it with TRY, the verify checks and the permanent apply."
	BootstrapDoc     = "Bootstraps etcd on the node, once; a node already bootstrapped counts as done. Cannot be undone."
	KubeconfigDoc    = "Fetches the cluster's kubeconfig from the node and writes it (mode 0600) for later steps."
	ReadDoc          = "Reads a file through the Talos API and compares its content."
	ServiceHealthDoc = "Checks that Talos services are running and healthy."
	UpgradeDoc       = "Upgrades Talos to a target version with the Image Factory installer of the schematic, and waits until the node runs it."
)

// Schema describes the provider block and the step types, derived from
// the structs above.
var Schema = phases.Schema{
	Provider: sdk.Block(ProviderAttrs{}),
	StepTypes: map[string]phases.StepType{
		MachineConfig: step[MachineConfigAttrs](MachineConfigDoc, MachineConfigOutputs{}, false),
		Bootstrap:     step[BootstrapAttrs](BootstrapDoc, nil, false),
		Kubeconfig:    step[KubeconfigAttrs](KubeconfigDoc, KubeconfigOutputs{}, false),
		Read:          step[ReadAttrs](ReadDoc, nil, true),
		ServiceHealth: step[ServiceHealthAttrs](ServiceHealthDoc, nil, true),
		Upgrade:       step[UpgradeAttrs](UpgradeDoc, UpgradeOutputs{}, false),
	},
}

// step is a step type's schema; the ones usable as checks (canCheck)
// only read or wait, so the first Ctrl-C ends them at once (WaitsOnly).
func step[A any](doc string, outputs any, canCheck bool) phases.StepType {
	st, err := sdk.StepSchema[A](doc, outputs)
	if err != nil {
		panic("talosschema: " + err.Error())
	}
	st.CanCheck, st.WaitsOnly = canCheck, canCheck
	return st
}
