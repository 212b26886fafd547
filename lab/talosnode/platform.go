package talosnode

import (
	"bytes"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// The nocloud platform (Talos'
// internal/app/machined/pkg/runtime/v1alpha1/platform/nocloud): before any
// maintenance mode, machined looks for a volume labelled cidata or CIDATA
// (the config drive Incus makes of the instance's cloud-init.* keys for
// a disk device with source cloud-init:config) and takes its user-data
// as the machine config. A user-data that starts with #cloud-config is
// not Talos' and is ignored, as no user-data is: the node then waits in
// maintenance mode, as a metal image does.

// installFromPlatformLocked boots a nocloud image: the config of the
// drive is loaded and validated as the maintenance API would, and the node
// installs from it without serving the maintenance API. A config that
// does not load, validate or install leaves it in maintenance mode, the
// error in its log.
func (n *Node) installFromPlatformLocked() {
	data := n.opts.UserData
	first, _, _ := bytes.Cut(data, []byte("\n"))
	switch {
	case data == nil:
		n.logfLocked(facilityUser, "warning", "[talos] nocloud: no config drive (cidata) found")
		return
	case string(bytes.TrimSpace(first)) == "#cloud-config":
		n.logfLocked(facilityUser, "warning", "[talos] nocloud: the user-data of the config drive is a #cloud-config, which Talos does not read")
		return
	}
	n.logfLocked(facilityUser, "info", "[talos] nocloud: fetching machine config from: cidata/user-data")
	if err := n.platformInstallLocked(data); err != nil {
		n.installFailures = append(n.installFailures, err.Error())
		n.logfLocked(facilityUser, "error", "[talos] nocloud: the machine config of the config drive: %s", err)
		return
	}
	n.platformConfig = hashConfig(data)
	n.maintenance = false
	n.bootLocked("installed from the config drive")
}

// platformInstallLocked validates the config as a node that must install
// does, then installs it.
func (n *Node) platformInstallLocked(data []byte) error {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return fmt.Errorf("failed to parse config: %w", err)
	}
	if err = checkReleaseKinds(n.state.Version, cfg); err != nil {
		return fmt.Errorf("failed to parse config: %w", err)
	}
	if _, err = cfg.Validate(installMode{}); err != nil {
		return fmt.Errorf("configuration validation failed: %w", err)
	}
	return n.installLockedFromMaintenance(cfg, append([]byte(nil), data...))
}

// PlatformConfig is the SHA-256 of the config the node installed from its
// config drive (nocloud); "" when it took none from there.
func (n *Node) PlatformConfig() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.platformConfig
}
