package talos

import (
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret"
)

// TypeName is the provider type (and the name its plugin program serves);
// talosschema.TypeName is the same for migrate.
const TypeName = "talos"

// providerAttrs is the provider block (decoded in config.go).
type providerAttrs struct {
	Endpoints         []string `cty:"endpoints" doc:"Talos API endpoints (host or host:port); default the talosconfig context's."`
	Nodes             []string `cty:"nodes" doc:"Nodes to act on; default the context's nodes, else the endpoints."`
	Talosconfig       string   `cty:"talosconfig" doc:"Path to the talosconfig, relative to the runbook; may be age-encrypted. Default $TALOSCONFIG or ~/.talos/config."`
	Context           string   `cty:"context" doc:"The talosconfig context; default its current context."`
	Version           string   `cty:"version" required:"true" doc:"The Talos version the cluster runs, 1.13 or 1.14 (such as \"v1.14.7\"): configs are rendered for it with that release's version contract (1.14's multi-document Kubernetes config and UnattendedInstallConfig), apply modes follow it, and steps refuse a node running another. A patch key the release keeps in a typed document fails the plan, which shows the patch rewritten (migrate patches upgrade writes it). A release newer than the linked machinery (v1.14; 1.15 needs machinery v1.15) or older than 1.13 is refused at plan."`
	KubernetesVersion *string  `cty:"kubernetes_version" doc:"The Kubernetes version; default the pinned release's default (1.36.1 for Talos 1.13, 1.37.0 for 1.14)."`
	ClusterName       string   `cty:"cluster_name" doc:"The cluster name; default the talosconfig context's cluster, else \"talos\"."`
	ClusterEndpoint   string   `cty:"cluster_endpoint" doc:"The Kubernetes API endpoint, https://IP:6443; default the first endpoint on port 6443."`
	Secrets           string   `cty:"secrets" doc:"Path to the secrets bundle YAML (talosctl gen secrets), relative to the runbook; may be age-encrypted."`
	InstallDisk       *string  `cty:"install_disk" doc:"The install disk by device name, \"/dev/sda\" by default; a name can change between boots: prefer install_disk_selector."`
	// InstallDiskSelector: the install disk by what it is, in the CEL of
	// UserVolumeConfig's diskSelector.match (installdisk.go).
	InstallDiskSelector *string  `cty:"install_disk_selector" doc:"The install disk by what it is: a CEL expression over the disk, as UserVolumeConfig's provisioning.diskSelector.match (machinery's disk environment: disk.serial, disk.wwid, disk.model, disk.size, disk.transport, disk.rotational, ...; GiB, GB...), such as disk.serial == \"incus_root\". At plan it must match exactly one of the disks a node in maintenance mode reports. Talos 1.14 carries it in UnattendedInstallConfig; Talos 1.13's machine.install has no CEL, so it is written as machine.install.diskSelector, which takes a conjunction (&&) of disk.serial, disk.wwid, disk.model, disk.modalias, disk.uuid or disk.bus_path == \"literal\", disk.transport == \"nvme\" or \"mmc\", disk.rotational or its negation. Not with install_disk."`
	Schematic           string   `cty:"schematic" doc:"An Image Factory schematic as YAML; the installer image is <image_factory's host>/metal-installer/<ID>:<version> (Image Factory's metal installer, talosctl 1.14's default; also served for 1.13), the ID being the one the factory answers for the schematic (it may add fields, such as an owner: the plan shows both IDs)."`
	Extensions          []string `cty:"extensions" doc:"Official system extensions (such as \"siderolabs/i915\") making the schematic, instead of schematic."`
	AgeIdentity         string   `cty:"age_identity" doc:"Path to an age identity file; default $MIGRATE_AGE_IDENTITY (an identity or a path)."`
	ImageFactory        string   `cty:"image_factory" doc:"The Image Factory's base URL, where the schematic is registered (its answered ID is the one used), talos_image downloads the ISO, and whose host serves the installer images; default https://factory.talos.dev."`
}

// Provider talks to Talos nodes through their machine API. It is safe for
// concurrent use once configured. The SDK does the envelope of every
// call; the provider itself is the settings its handlers get.
type Provider struct {
	*sdk.Provider[*Provider]
	s *settings // set by Configure

	mu     sync.Mutex
	client *client.Client
	reach  sdk.Reach // the endpoints' last answers (reach.go)
}

// New returns an unconfigured Talos provider.
func New() *Provider {
	p := &Provider{}
	p.Provider = &sdk.Provider[*Provider]{
		Name:          TypeName,
		Settings:      providerAttrs{},
		ConfigureFunc: p.configure,
		CloseFunc:     p.close,
		Steps:         []sdk.Step[*Provider]{machineConfigStep, bootstrapStep, kubeconfigStep, readStep, serviceHealthStep, upgradeStep, imageStep},
		// Every call scrubs the secrets loaded with the provider block
		// besides the step's own, and blanks secret fields of YAML.
		Scrub: func(p *Provider) *secret.Scrubber {
			s := newScrubber()
			if p != nil && p.s != nil {
				s.Merge(p.s.scrub)
			}
			return s
		},
	}
	return p
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

// close closes the connection to the nodes.
func (p *Provider) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client = nil
	return err
}

// handle is what the SDK gives every handler.
type handle = sdk.Call[*Provider]

// call is one call of a handler: the SDK's, with the provider's settings
// and the helpers every step type uses at hand.
type call struct {
	*sdk.Call[*Provider]
	p    *Provider
	s    *settings
	log  *secret.Writer
	addr phases.Address
	// mac is the MAC the step's node must have (talos_machine_config's
	// mac), "" when none: an unreachable node's error names it.
	mac string
}

func newCall(c *handle) *call {
	return &call{Call: c, p: c.Settings, s: c.Settings.s, log: c.Log, addr: c.Addr}
}

// none is the private or revert data of step types that keep none.
type none = struct{}

// nothingToUndo is the revert data of checks.
func nothingToUndo() *sdk.RevertData[none] {
	return &sdk.RevertData[none]{Description: "nothing to undo"}
}
