package talosnode

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node runs one of two Talos releases (Options.Version), and its
// machine API behaves as that release's machined does. It links one
// machinery (the newest); where the releases differ, this file says how:
//
//   - Talos 1.14 refuses the REBOOT apply mode on an installed node
//     (Unimplemented), resolves AUTO to NO_REBOOT and applies every change
//     without a reboot (no CanApplyImmediate check);
//   - Talos 1.13 takes REBOOT, resolves AUTO with CanApplyImmediate, and
//     refuses NO_REBOOT and TRY changes outside its immediate list;
//   - a Talos 1.13 node's config loader knows only the document kinds of
//     machinery v1.13: the multi-document Kubernetes config, the
//     UnattendedInstallConfig and the other kinds 1.14 brought fail to
//     decode ("not registered"), as a config rendered for 1.14 does on a
//     real 1.13 node.

// KubernetesVersionOf is the Kubernetes a release renders by default, as
// its talosctl gen config does: machinery v1.13.3's default for 1.13 (the
// linked machinery's 1.37 is too new for 1.13), the linked machinery's
// for 1.14. The talos provider keeps the same table (providers/talos,
// release.go).
func KubernetesVersionOf(version string) string {
	c, err := config.ParseContractFromVersion(version)
	if err == nil && !c.Greater(config.TalosVersion1_13) {
		return "1.36.1"
	}

	return constants.DefaultKubernetesVersion
}

// rebootModeRemoved says whether the release refuses REBOOT (1.14 on).
func rebootModeRemoved(version string) bool {
	c, err := config.ParseContractFromVersion(version)

	return err == nil && c.Greater(config.TalosVersion1_13)
}

// errRebootModeRemoved is Talos 1.14's answer to a REBOOT apply.
var errRebootModeRemoved = status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")

// kinds113 are the document kinds machinery v1.13.3 registers (its
// config/types packages; "v1alpha1" is the kind-less v1alpha1 document).
var kinds113 = map[string]bool{
	"v1alpha1": true, "BlackholeRouteConfig": true, "BondConfig": true, "BridgeConfig": true,
	"DHCPv4Config": true, "DHCPv6Config": true, "DummyLinkConfig": true, "EnvironmentConfig": true,
	"EthernetConfig": true, "EventSinkConfig": true, "ExistingVolumeConfig": true,
	"ExtensionServiceConfig": true, "ExternalVolumeConfig": true, "HCloudVIPConfig": true,
	"HostnameConfig": true, "ImageVerificationConfig": true, "KmsgLogConfig": true,
	"KubeSpanConfig": true, "KubeSpanEndpointsConfig": true, "Layer2VIPConfig": true,
	"LinkAliasConfig": true, "LinkConfig": true, "NetworkDefaultActionConfig": true,
	"NetworkRuleConfig": true, "OOMConfig": true, "PCIDriverRebindConfig": true,
	"RawVolumeConfig": true, "RegistryAuthConfig": true, "RegistryMirrorConfig": true,
	"RegistryTLSConfig": true, "ResolverConfig": true, "RoutingRuleConfig": true,
	"SideroLinkConfig": true, "StaticHostConfig": true, "SwapVolumeConfig": true,
	"TCPProbeConfig": true, "TimeSyncConfig": true, "TrustedRootsConfig": true,
	"UserVolumeConfig": true, "VLANConfig": true, "VRFConfig": true, "VolumeConfig": true,
	"WatchdogTimerConfig": true, "WireguardConfig": true, "ZswapConfig": true,
}

// checkReleaseKinds refuses, on a 1.13 node, the documents its config
// loader does not know, with machinery's decode error (without its line).
func checkReleaseKinds(version string, cfg config.Provider) error {
	if rebootModeRemoved(version) {
		return nil
	}

	for _, d := range cfg.Documents() {
		kind := d.Kind()
		if kind == "" {
			kind = "v1alpha1"
		}

		if !kinds113[kind] {
			name := ""
			if nd, ok := d.(interface{ Name() string }); ok {
				name = nd.Name()
			}

			return fmt.Errorf("error decoding document %s/%s/%s: %q %q: not registered", d.APIVersion(), kind, name, kind, d.APIVersion())
		}
	}

	return nil
}

// releaseMode is, on 1.14, the mode an apply takes effect in, with its
// details: AUTO is NO_REBOOT, nothing checks for a reboot. ok is false on
// 1.13, whose applyMode decides.
func releaseMode(version string, mode machine.ApplyConfigurationRequest_Mode) (_ machine.ApplyConfigurationRequest_Mode, details string, ok bool) {
	if !rebootModeRemoved(version) {
		return mode, "", false
	}

	//nolint:exhaustive
	switch mode {
	case machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if mode == machine.ApplyConfigurationRequest_AUTO {
			mode = machine.ApplyConfigurationRequest_NO_REBOOT
		}

		return mode, "Applied configuration without a reboot", true
	case machine.ApplyConfigurationRequest_STAGED:
		return mode, "Staged configuration to be applied after the next reboot", true
	}

	return mode, "", false
}
