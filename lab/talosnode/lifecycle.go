package talosnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// metalMode is the runtime mode of an installed metal node: validation sees
// "metal", not in a container, and (as machined's modeWrapper does for an
// installed node) no install requirement.
type metalMode struct{}

func (metalMode) String() string        { return "metal" }
func (metalMode) RequiresInstall() bool { return false }
func (metalMode) InContainer() bool     { return false }

// boot brings the node up from its persisted state: the persisted config
// becomes the running one, a staged upgrade is installed.
func (n *Node) boot(reason string) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.bootLocked(reason)
}

func (n *Node) bootLocked(reason string) {
	if b, err := os.ReadFile(n.persistedConfigPath()); err == nil {
		n.active = b
	}

	if n.state.StagedUpgrade != "" {
		image := n.state.StagedUpgrade
		n.state.StagedUpgrade = ""
		n.installLocked(image)
	}

	n.switchPartitionLocked()
	n.pulled = map[string]struct{}{} // the system containerd's store is in memory

	n.bootTime = time.Now()
	n.bootCtx, n.rebootCancel = context.WithCancel(context.Background())

	// a new boot id per boot, where talosctl looks for it to see a reboot
	bootID := filepath.Join(n.rootDir, BootIDPath)
	if err := os.MkdirAll(filepath.Dir(bootID), 0o755); err == nil {
		os.WriteFile(bootID, []byte(actorID()+"\n"), 0o444) //nolint:errcheck
	}

	n.bootLogLocked(reason)
	n.reportRunningImageLocked()
	n.hardwareLocked()
	n.startControlPlaneLocked()
}

// installLocked runs the "installer" of a legacy upgrade at boot: the
// node comes back with the image's version unless the version cannot be
// upgraded to from the current one.
func (n *Node) installLocked(image string) {
	if err := n.runInstallerLocked(image); err != nil {
		n.logfLocked(facilityUser, "error", "[talos] upgrade failed: %s (image %q), booting %s", err, image, n.state.Version)
	}
}

// runInstallerLocked checks that the image's version may follow the
// running one, and writes it to the other boot partition.
func (n *Node) runInstallerLocked(image string) error {
	tag, err := imageTag(image)
	if err == nil {
		err = checkUpgradeable(n.state.Version, tag)
	}

	if err != nil {
		return err
	}

	next := otherPartition(n.runningLocked().Partition)
	n.logfLocked(facilityUser, "warning", "[talos] installed %s from %s to boot entry %s (running %s)", tag, image, next, n.state.Version)
	n.writeOtherPartitionLocked(tag, image)

	return nil
}

func checkUpgradeable(from, to string) error {
	host, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: from})
	if err != nil {
		return err
	}

	target, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: to})
	if err != nil {
		return err
	}

	return target.UpgradeableFrom(host)
}

// imageTag returns the tag of an image reference ("repo/name:tag[@digest]").
func imageTag(ref string) (string, error) {
	r := ref
	if i := strings.Index(r, "@"); i >= 0 {
		r = r[:i]
	}

	slash := strings.LastIndex(r, "/")
	colon := strings.LastIndex(r, ":")

	if ref == "" || colon <= slash || colon == len(r)-1 {
		return "", fmt.Errorf("image reference %q has no tag", ref)
	}

	return r[colon+1:], nil
}

// scheduleReboot reboots the node shortly (after the current reply is sent):
// the API answers Unavailable for RebootDuration, streams are cut, a pending
// TRY is lost (its config was only in memory), then the node boots.
func (n *Node) scheduleReboot(reason string) {
	n.rebootPending.Add(1)

	go func() {
		defer n.rebootPending.Done()

		time.Sleep(50 * time.Millisecond)

		n.mu.Lock()
		if n.stopped {
			n.mu.Unlock()

			return
		}

		n.logfLocked(facilityUser, "warning", "[talos] reboot sequence: %s", reason)
		n.logfLocked(facilityKern, "notice", "reboot: Restarting system")
		n.unavailable = time.Now().Add(24 * time.Hour) // until booted
		n.cancelRollbackLocked()
		n.rebootCancel()
		n.mu.Unlock()

		if n.opts.ControlPlane != nil {
			n.opts.ControlPlane.Stop() // the node's Kubernetes goes down with it
		}

		time.Sleep(n.opts.RebootDuration)

		n.mu.Lock()
		defer n.mu.Unlock()

		if n.stopped {
			return
		}

		n.bootLocked(reason)
		n.unavailable = time.Time{}
	}()
}

func (n *Node) cancelRollbackLocked() {
	if n.rollback != nil {
		n.rollback.Stop()
		n.rollback = nil
		n.rollbackTo = nil
		n.tryGen++
	}
}

func (n *Node) persistLocked(b []byte) error {
	return writeFileAtomic(n.persistedConfigPath(), b, 0o600)
}

// applyConfiguration follows machined's ApplyConfiguration of the node's
// release (release.go says where 1.13 and 1.14 differ).
func (n *Node) applyConfiguration(in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()

	rec := ApplyRecord{
		Time:       time.Now(),
		Mode:       in.GetMode().String(),
		DryRun:     in.GetDryRun(),
		ConfigHash: hashConfig(in.GetData()),
	}

	resp, err := n.applyLocked(in, &rec)
	if err != nil {
		rec.Err = err.Error()
	}

	n.applies = append(n.applies, rec)

	return resp, err
}

func (n *Node) applyLocked(in *machine.ApplyConfigurationRequest, rec *ApplyRecord) (*machine.ApplyConfigurationResponse, error) {
	mode := in.GetMode()
	modeName := mode.String()

	// v1.13 cancels a pending TRY rollback first thing for every non-TRY
	// request, dry runs and invalid configs included (siderolabs/talos#14343).
	if mode != machine.ApplyConfigurationRequest_TRY && !n.opts.TryRollbackFix {
		n.cancelRollbackLocked()
	}

	cfg, current, warnings, err := n.checkApplyLocked(in)
	if err != nil {
		return nil, err
	}

	var modeDetails, modeErr string

	if m, details, ok := releaseMode(n.state.Version, mode); ok {
		mode, modeDetails = m, details // 1.14: no reboot, ever
	} else if mode, modeDetails, modeErr, err = applyMode(mode, current, cfg); err != nil {
		return nil, err
	}

	if in.GetMode() == machine.ApplyConfigurationRequest_AUTO {
		modeName = fmt.Sprintf("%s(%s)", modeName, mode)
	}

	rec.EffectiveMode = mode.String()

	if in.GetDryRun() {
		return dryRun(current, cfg, mode, modeDetails)
	}

	if n.opts.TryRollbackFix && mode != machine.ApplyConfigurationRequest_TRY {
		n.cancelRollbackLocked()
	}

	n.logfLocked(facilityUser, "warning", "[talos] apply config request: mode %s {\"config\": \"sha256:%s\"}", strings.ToLower(modeName), rec.ConfigHash[:12])

	note, err := n.commitLocked(in, mode)
	if err != nil {
		return nil, err
	}

	return &machine.ApplyConfigurationResponse{
		Messages: []*machine.ApplyConfiguration{{
			Mode:        mode,
			Warnings:    warnings,
			ModeDetails: modeDetails + note + modeErr,
		}},
	}, nil
}

// checkApplyLocked loads and validates the applied config, as Talos does;
// it returns it with the active one and the validation warnings.
func (n *Node) checkApplyLocked(in *machine.ApplyConfigurationRequest) (cfg, current config.Provider, warnings []string, err error) {
	cfg, err = configloader.NewFromBytes(in.GetData())
	if err != nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if cfg.RawV1Alpha1() == nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	if err = checkReleaseKinds(n.state.Version, cfg); err != nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if in.GetMode() == machine.ApplyConfigurationRequest_REBOOT && rebootModeRemoved(n.state.Version) {
		return nil, nil, nil, errRebootModeRemoved
	}

	warnings, err = cfg.Validate(metalMode{})
	if err != nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	runtimeWarnings, err := n.runtimeValidateLocked(cfg)
	if err != nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	warnings = append(warnings, runtimeWarnings...)

	current, err = configloader.NewFromBytes(n.active)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("current config: %w", err)
	}

	return cfg, current, warnings, nil
}

// applyMode is the mode an apply takes effect in (AUTO chooses), with its
// details and, for an AUTO that reboots, why.
func applyMode(mode machine.ApplyConfigurationRequest_Mode, current, cfg config.Provider) (_ machine.ApplyConfigurationRequest_Mode, details, why string, err error) {
	details = "Applied configuration with a reboot"

	//nolint:exhaustive
	switch mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err = canApplyImmediate(current, cfg); err != nil {
			return mode, "", "", status.Error(codes.InvalidArgument, err.Error())
		}

		details = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		details = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err = canApplyImmediate(current, cfg); err != nil {
			return machine.ApplyConfigurationRequest_REBOOT, "Applied configuration with a reboot", ": " + err.Error(), nil
		}

		return machine.ApplyConfigurationRequest_NO_REBOOT, "Applied configuration without a reboot", "", nil
	}

	return mode, details, "", nil
}

// dryRun is the answer of a dry run: what the mode would do, and the diff.
func dryRun(current, cfg config.Provider, mode machine.ApplyConfigurationRequest_Mode, modeDetails string) (*machine.ApplyConfigurationResponse, error) {
	diff, err := configdiff.DiffConfigs(current, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to generate diff: %w", err)
	}

	if diff == "" {
		diff = "No changes."
	}

	return &machine.ApplyConfigurationResponse{
		Messages: []*machine.ApplyConfiguration{{
			Mode:        mode,
			ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s", modeDetails, diff),
		}},
	}, nil
}

// commitLocked makes the applied config take effect in mode; the note is
// added to the mode's details (a TRY's timeout).
func (n *Node) commitLocked(in *machine.ApplyConfigurationRequest, mode machine.ApplyConfigurationRequest_Mode) (note string, err error) {
	data := append([]byte(nil), in.GetData()...)

	//nolint:exhaustive
	switch mode {
	case machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.GetTryModeTimeout() != nil {
			timeout = in.GetTryModeTimeout().AsDuration()
		}

		note = fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())

		n.cancelRollbackLocked()
		n.tryGen++
		gen := n.tryGen
		n.rollbackTo = n.active
		n.rollback = time.AfterFunc(timeout, func() { n.revert(gen) })
		n.active = data
		n.mountsLocked()
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		if err = n.persistLocked(data); err != nil {
			return "", err
		}

		n.active = data
		n.mountsLocked()
	case machine.ApplyConfigurationRequest_STAGED:
		if err = n.persistLocked(data); err != nil {
			return "", err
		}
	case machine.ApplyConfigurationRequest_REBOOT:
		if err = n.persistLocked(data); err != nil {
			return "", err
		}

		n.scheduleReboot("apply configuration")
	default:
		return "", fmt.Errorf("incorrect mode '%s' specified for the apply config call", mode.String())
	}

	return note, nil
}

// revert is the TRY rollback timer: the config active before the TRY runs again.
func (n *Node) revert(gen int) {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.stopped || n.rollback == nil || gen != n.tryGen {
		return
	}

	n.logfLocked(facilityUser, "warning", "[talos] rolling back the configuration")
	n.active = n.rollbackTo
	n.mountsLocked()
	n.applies = append(n.applies, ApplyRecord{Time: time.Now(), Mode: "REVERT", EffectiveMode: "REVERT", ConfigHash: hashConfig(n.rollbackTo)})
	n.rollback = nil
	n.rollbackTo = nil
}

// runtimeValidateLocked is the part of RuntimeValidate that applies to an
// installed node: Kubernetes image tags must be supported by the Talos
// version the node runs.
func (n *Node) runtimeValidateLocked(cfg config.Provider) ([]string, error) {
	var (
		warnings []string
		errs     []error
	)

	talosVersion, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: n.state.Version})
	if err != nil {
		return nil, err
	}

	check := func(name, ref string) {
		k8s, err := compatibility.KubernetesVersionFromImageRef(ref)
		if err == nil {
			err = k8s.SupportedWith(talosVersion)
		} else {
			err = fmt.Errorf("failed to parse Kubernetes version from image reference %q: %w", ref, err)
		}

		if err != nil {
			errs = append(errs, fmt.Errorf("%s image is not valid: %w", name, err))
		}
	}

	if m := cfg.Machine(); m != nil {
		if len(m.Install().Extensions()) > 0 {
			warnings = append(warnings, ".machine.install.extensions is deprecated, please see https://docs.siderolabs.com/talos/latest/platform-specific-installations/boot-assets")
		}

		// The K8s* accessors read the v1alpha1 sections (Talos 1.13's
		// shape) and the multi-document Kubernetes config (1.14's) alike.
		if k := cfg.K8sKubeletConfig(); k != nil {
			check("kubelet", k.Image())
		}

		if m.Type().IsControlPlane() {
			if c := cfg.K8sAPIServerConfig(); c != nil {
				check("kube-apiserver", c.Image())
			}

			if c := cfg.K8sControllerManagerConfig(); c != nil {
				check("kube-controller-manager", c.Image())
			}

			if c := cfg.K8sSchedulerConfig(); c != nil {
				check("kube-scheduler", c.Image())
			}
		}
	}

	if len(errs) > 0 {
		return warnings, fmt.Errorf("v1alpha1.Config: %w", errors.Join(errs...))
	}

	return warnings, nil
}

// canApplyImmediate follows machined's CanApplyImmediate: only the listed
// parts of the v1alpha1 document may change without a reboot; every other
// document kind may always change.
func canApplyImmediate(current, next config.Provider) error {
	currentConfig := current.RawV1Alpha1()
	if currentConfig == nil {
		return errors.New("current config is not v1alpha1")
	}

	newConfig := next.RawV1Alpha1()
	if newConfig == nil {
		return errors.New("new config is not v1alpha1")
	}

	newConfig = newConfig.DeepCopy()

	newConfig.ConfigDebug = currentConfig.ConfigDebug
	newConfig.ClusterConfig = currentConfig.ClusterConfig

	if newConfig.MachineConfig != nil && currentConfig.MachineConfig != nil {
		nm, cm := newConfig.MachineConfig, currentConfig.MachineConfig

		nm.MachineCA = cm.MachineCA
		nm.MachineAcceptedCAs = cm.MachineAcceptedCAs
		nm.MachineTime = cm.MachineTime //nolint:staticcheck
		nm.MachineCertSANs = cm.MachineCertSANs
		nm.MachineInstall = cm.MachineInstall
		nm.MachineNetwork = cm.MachineNetwork //nolint:staticcheck
		nm.MachineSysfs = cm.MachineSysfs
		nm.MachineSysctls = cm.MachineSysctls
		nm.MachineLogging = cm.MachineLogging
		nm.MachineControlPlane = cm.MachineControlPlane
		nm.MachineKubelet = cm.MachineKubelet
		nm.MachineKernel = cm.MachineKernel
		nm.MachineRegistries = cm.MachineRegistries //nolint:staticcheck
		nm.MachinePods = cm.MachinePods
		nm.MachineSeccompProfiles = cm.MachineSeccompProfiles
		nm.MachineNodeAnnotations = cm.MachineNodeAnnotations
		nm.MachineNodeLabels = cm.MachineNodeLabels
		nm.MachineNodeTaints = cm.MachineNodeTaints

		if nm.MachineFeatures != nil && cm.MachineFeatures != nil {
			nm.MachineFeatures.KubernetesTalosAPIAccessConfig = cm.MachineFeatures.KubernetesTalosAPIAccessConfig
			nm.MachineFeatures.KubePrismSupport = cm.MachineFeatures.KubePrismSupport
			nm.MachineFeatures.HostDNSSupport = cm.MachineFeatures.HostDNSSupport
			nm.MachineFeatures.ImageCacheSupport = cm.MachineFeatures.ImageCacheSupport
			nm.MachineFeatures.FeatureNodeAddressSortAlgorithm = cm.MachineFeatures.FeatureNodeAddressSortAlgorithm
		}
	}

	if !reflect.DeepEqual(currentConfig, newConfig) {
		diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(currentConfig), container.NewV1Alpha1(newConfig))
		if err != nil {
			return fmt.Errorf("error calculating diff: %w", err)
		}

		return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
	}

	return nil
}
