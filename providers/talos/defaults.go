package talos

import (
	"fmt"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/homelab-migrate/migrate/phases"
)

// A defaultChange is a setting a release's config generation turns on
// that the configs of older releases lack: a config rendered for the new
// release, applied to a node configured under an older one (after
// talos_upgrade), turns it on for that node's workloads. Talos does not:
// an upgraded node keeps its config, so the change comes with migrate's
// next apply, and the plan says what to set to keep the old behaviour.
type defaultChange struct {
	summary string
	on      func(coreconfig.Config) bool
	effect  string // what it does to the node's workloads
	keep    string // the patch document that keeps the older behaviour
}

// defaultChanges114 are Talos 1.14's, read in machinery v1.14.1:
// config/contract.go (WorkloadIsolationEnabledByDefault,
// FilesystemTrimEnabledByDefault), config/generate/security_profile.go
// and block.go, config/types/runtime/security_profile_config.go and
// block/volume_config.go (MountSpec.Secure). Its other contract changes
// move documents without changing what the node does (talospatch).
var defaultChanges114 = []defaultChange{
	{
		summary: "Workload Isolation Turned On",
		on: func(c coreconfig.Config) bool {
			s := c.SecurityProfileConfig()
			return s != nil && s.WorkloadIsolation()
		},
		effect: "Talos 1.14 renders a SecurityProfileConfig with workloadIsolation: true: containerd, the kubelet and every pod then run in sandboxd's own PID and mount namespace, apart from machined. Privileged pods with hostPath mounts (the render node's /dev/dri, /var/mnt/data) and mounts made after the pods started (a volume mounted late under /var/mnt) are what to check after the apply",
		keep:   "apiVersion: v1alpha1\nkind: SecurityProfileConfig\nworkloadIsolation: false",
	},
	{
		summary: "EPHEMERAL Mounted nosuid,nodev",
		on: func(c coreconfig.Config) bool {
			v, ok := c.Volumes().ByName(constants.EphemeralPartitionLabel)
			return ok && v.Mount().Secure()
		},
		effect: "Talos 1.14 renders a VolumeConfig for EPHEMERAL with mount.secure: true: /var is mounted nosuid,nodev, so a hostPath volume under /var can no longer hold a device node or a setuid program",
		keep:   "apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nmount:\n  secure: false",
	},
}

// crossingWarnings: for each default the rendered config turns on that
// the node's running config lacks, a warning naming the node, the effect
// and the patch that keeps the node as it is.
func crossingWarnings(node string, running, rendered coreconfig.Config) phases.Diagnostics {
	var diags phases.Diagnostics
	for _, d := range defaultChanges114 {
		if d.on(rendered) && !d.on(running) {
			diags = append(diags, phases.Diagnostic{Severity: phases.Warning, Summary: d.summary,
				Detail: fmt.Sprintf("Node %s runs a config without this setting (rendered for an older release); applying this one turns it on. %s. To keep the node as it is, add to the patches:\n\n%s", node, d.effect, d.keep)})
		}
	}
	return diags
}
