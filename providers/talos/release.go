package talos

import (
	"fmt"
	"runtime/debug"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/gendata"
)

// The provider links one machinery, the newest that builds with the rest
// of the module, and renders for the release the cluster runs (the
// version pin) with machinery's version contract of that release. A
// machinery renders for its own release and older ones only; the provider
// supports the current releases from oldestContract on.
var (
	// libraryContract is the release of the linked machinery, read from
	// its own version tag: bumping machinery in go.mod (to v1.15.0) is
	// what lets the provider render for that release.
	libraryContract = mustContract(gendata.VersionTag)
	// oldestContract is the oldest release the provider renders for.
	oldestContract = coreconfig.TalosVersion1_13
)

func mustContract(tag string) *coreconfig.VersionContract {
	c, err := coreconfig.ParseContractFromVersion(tag)
	if err != nil {
		panic(fmt.Sprintf("the linked machinery's version tag %q: %v", tag, err))
	}
	return c
}

// machineryModule is the module whose version libraryVersion reports.
const machineryModule = "github.com/siderolabs/talos/pkg/machinery"

// libraryVersion is the linked machinery's module version, for messages
// (the contract's release when the binary carries no build info).
func libraryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == machineryModule {
				return m.Version
			}
		}
	}
	return libraryContract.String()
}

// releaseContract is the version contract of a pin, or why the provider
// cannot render for it: a release newer than the library, or older than
// the oldest it supports.
func releaseContract(version string) (*coreconfig.VersionContract, error) {
	c, err := coreconfig.ParseContractFromVersion(version)
	if err != nil {
		return nil, fmt.Errorf("%q is not a Talos version (such as \"v1.14.1\")", version)
	}
	if c.Greater(libraryContract) {
		return nil, fmt.Errorf("Talos %s is newer than the machine-config library this migrate links (machinery %s renders for Talos %s and older): a config rendered by it could be refused by the node, or miss what %s changed. Pin a %s or %s release, or use a migrate built with machinery %s",
			version, libraryVersion(), libraryContract, c, libraryContract, oldestContract, c)
	}
	if oldestContract.Greater(c) {
		return nil, fmt.Errorf("Talos %s is older than the oldest release the talos provider supports (%s): upgrade the cluster to Talos %s or %s first (talosctl upgrade, or a talos_upgrade step with the older migrate), then pin that version",
			version, oldestContract, oldestContract, libraryContract)
	}
	return c, nil
}

// defaultKubernetes is the Kubernetes a release renders by default, as its
// talosctl gen config does: machinery v1.13.3's default for 1.13 (the
// linked machinery's 1.37 is too new for 1.13), the linked machinery's
// for 1.14. lab/talosnode keeps the same table (KubernetesVersionOf).
func defaultKubernetes(version string) string {
	c, err := coreconfig.ParseContractFromVersion(version)
	if err == nil && !c.Greater(coreconfig.TalosVersion1_13) {
		return "1.36.1"
	}
	return constants.DefaultKubernetesVersion
}

// rebootModeRemoved says whether the release has no REBOOT apply mode:
// Talos 1.14 refuses it on an installed node ("the REBOOT mode is not
// supported, please use AUTO or NO_REBOOT modes instead"), resolves AUTO
// to NO_REBOOT and applies every change without a reboot.
func rebootModeRemoved(version string) bool {
	c, err := coreconfig.ParseContractFromVersion(version)
	return err == nil && c.Greater(coreconfig.TalosVersion1_13)
}

// modesOf lists the apply modes a release takes, as the mode attribute
// names them.
func modesOf(version string) string {
	if rebootModeRemoved(version) {
		return "\"no-reboot\" or \"auto\""
	}
	return "\"no-reboot\", \"auto\" or \"reboot\""
}

// modeNote says, for the plan's ladder line, what the release makes of
// the mode.
func modeNote(version, modeName string) string {
	if modeName == "auto" && rebootModeRemoved(version) {
		return " (Talos " + version + " resolves auto to no-reboot: it applies every change without a reboot)"
	}
	return ""
}
