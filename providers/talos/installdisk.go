package talos

import (
	"errors"
	"fmt"
	"strings"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"github.com/homelab-migrate/migrate/phases"
)

// The install disk by what it is. install_disk_selector is a CEL
// expression over the disk as the node's volume manager shows it:
// machinery's DiskLocator environment, the one of UserVolumeConfig's
// provisioning.diskSelector.match. Talos 1.14 carries it as it is, in
// UnattendedInstallConfig's provisioning.diskSelector.match. Talos 1.13's
// machine.install has no CEL: its diskSelector fields are written from the
// expression when it is a conjunction of tests those fields make (serial,
// wwid, model, modalias, uuid, bus_path, the transport's type), and the
// plan checks machinery's own reading of them (DiskMatchExpression)
// against the node's disks.

// installDisk is the provider's choice of install disk.
type installDisk struct {
	device string          // install_disk, a device name; "" with a selector
	match  *cel.Expression // install_disk_selector
	// legacy is match as 1.13's machine.install.diskSelector, and lowered
	// its meaning as machinery reads it; legacyErr why there is none.
	legacy    *v1alpha1.InstallDiskSelector
	lowered   *cel.Expression
	legacyErr error
}

// parseInstallDisk reads install_disk and install_disk_selector.
func parseInstallDisk(device, selector *string, errf errorf) installDisk {
	switch {
	case device != nil && selector != nil:
		errf("Conflicting Attributes", "Set install_disk or install_disk_selector in the talos provider block, not both: the selector chooses the disk by what it is, install_disk by a device name that can change.")
		return installDisk{device: *device}
	case selector == nil:
		return installDisk{device: or(device, "/dev/sda")}
	}
	expr, err := cel.ParseBooleanExpression(*selector, celenv.DiskLocator())
	if err != nil {
		errf("Invalid Install Disk Selector", "install_disk_selector = %q is not a boolean CEL expression over the disk (as UserVolumeConfig's diskSelector.match, such as disk.serial == \"incus_root\" or disk.transport == \"nvme\" && disk.size > 500u * GB): %v.", *selector, err)
		return installDisk{}
	}
	d := installDisk{match: &expr}
	d.legacy, d.legacyErr = legacySelector(*selector)
	if d.legacyErr == nil {
		d.lowered, d.legacyErr = (&v1alpha1.InstallConfig{InstallDiskSelector: d.legacy}).DiskMatchExpression()
	}
	return d
}

// legacySelector writes a CEL expression as Talos 1.13's
// machine.install.diskSelector, or says why it cannot be.
func legacySelector(expr string) (*v1alpha1.InstallDiskSelector, error) {
	a, iss := celenv.DiskLocator().Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	sel := &v1alpha1.InstallDiskSelector{}
	for _, term := range conjuncts(a.NativeRep().Expr()) {
		if err := addTerm(sel, term); err != nil {
			return nil, err
		}
	}
	return sel, nil
}

func conjuncts(e celast.Expr) []celast.Expr {
	if isCall(e, operators.LogicalAnd) {
		args := e.AsCall().Args()
		return append(conjuncts(args[0]), conjuncts(args[1])...)
	}
	return []celast.Expr{e}
}

func isCall(e celast.Expr, fn string) bool {
	return e.Kind() == celast.CallKind && e.AsCall().FunctionName() == fn
}

// diskField is the field of disk that e reads (disk.serial: "serial"),
// "" when e is no such select.
func diskField(e celast.Expr) string {
	if e.Kind() != celast.SelectKind {
		return ""
	}
	s := e.AsSelect()
	if s.Operand().Kind() != celast.IdentKind || s.Operand().AsIdent() != "disk" {
		return ""
	}
	return s.FieldName()
}

// stringLiteral is e's value when it is a string literal.
func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// errNoLegacyField is the refusal of a test machine.install.diskSelector
// cannot make.
var errNoLegacyField = errors.New(`Talos 1.13's machine.install.diskSelector can only test disk.serial, disk.wwid, disk.model, disk.modalias, disk.uuid or disk.bus_path == "literal", disk.transport == "nvme" or "mmc", disk.rotational, and !disk.readonly, !disk.cdrom (which it implies), joined by &&`)

// addTerm sets the selector's field for one term of the conjunction.
func addTerm(sel *v1alpha1.InstallDiskSelector, e celast.Expr) error {
	switch {
	case diskField(e) == "rotational":
		return setType(sel, "hdd")
	case isCall(e, operators.LogicalNot):
		switch diskField(e.AsCall().Args()[0]) {
		case "rotational":
			return setType(sel, "ssd")
		case "readonly", "cdrom": // machinery adds both to every selector
			return nil
		}
	case isCall(e, operators.NotEquals):
		args := e.AsCall().Args()
		if v, ok := stringLiteral(args[1]); ok && v == "" && diskField(args[0]) == "transport" {
			return nil // implied too
		}
	case isCall(e, operators.Equals):
		args := e.AsCall().Args()
		v, ok := stringLiteral(args[1])
		if !ok {
			break
		}
		return setField(sel, diskField(args[0]), v)
	}
	return errNoLegacyField
}

func setType(sel *v1alpha1.InstallDiskSelector, t v1alpha1.InstallDiskType) error {
	if sel.Type != "" && sel.Type != t {
		return fmt.Errorf("the expression asks for two disk types (%s and %s)", sel.Type, t)
	}
	sel.Type = t
	return nil
}

// setField sets the field of a disk.FIELD == "v" test. The selector's
// fields are glob patterns: a literal holding one of their special
// characters would mean something else.
func setField(sel *v1alpha1.InstallDiskSelector, field, v string) error {
	if field == "transport" {
		switch v {
		case "nvme":
			return setType(sel, "nvme")
		case "mmc":
			return setType(sel, "sd")
		}
		return errNoLegacyField
	}
	fields := map[string]*string{"serial": &sel.Serial, "wwid": &sel.WWID, "model": &sel.Model, "modalias": &sel.Modalias, "uuid": &sel.UUID, "bus_path": &sel.BusPath}
	p, ok := fields[field]
	if !ok {
		return errNoLegacyField
	}
	if strings.ContainsAny(v, `*?[\`) {
		return fmt.Errorf("disk.%s == %q: machine.install.diskSelector's fields are glob patterns, and this value holds a pattern character", field, v)
	}
	if *p != "" {
		return fmt.Errorf("the expression tests disk.%s twice", field)
	}
	*p = v
	return nil
}

// render writes the install disk into a generated config: the device for
// install_disk; for a selector, the expression in 1.14's
// UnattendedInstallConfig, or 1.13's machine.install.diskSelector.
func (d installDisk) render(base coreconfig.Provider) (coreconfig.Provider, error) {
	if d.match == nil {
		return base, nil
	}
	docs := base.Documents()
	for _, doc := range docs {
		switch doc := doc.(type) {
		case *runtime.UnattendedInstallConfigV1Alpha1:
			doc.ProvisioningSpec.DiskSelector.Match = *d.match
		case *v1alpha1.Config:
			if doc.MachineConfig == nil || doc.MachineConfig.MachineInstall == nil { //nolint:staticcheck // 1.13's install
				continue
			}
			if d.legacyErr != nil {
				return nil, fmt.Errorf("install_disk_selector = %q cannot be written as Talos 1.13's machine.install.diskSelector (1.13 has no CEL for the install disk): %v. Select the disk by its serial, wwid, model or bus_path, or pin Talos 1.14, whose UnattendedInstallConfig carries the expression as it is", d.match.String(), d.legacyErr)
			}
			install := doc.MachineConfig.MachineInstall //nolint:staticcheck // 1.13's install
			install.InstallDisk, install.InstallDiskSelector = "", d.legacy
		}
	}
	return container.New(docs...)
}

// generated is the device generate.WithInstallDisk is given: install_disk,
// or a placeholder that render replaces with the selector (generate makes
// the install documents only for a disk).
func (d installDisk) generated() string {
	if d.match != nil {
		return "/dev/placeholder"
	}
	return d.device
}

// carriesCEL is true when the pinned release's install config takes the
// expression as it is (1.14's UnattendedInstallConfig).
func (s *settings) carriesCEL() bool {
	c, err := releaseContract(s.version)
	return err == nil && c.UnattendedInstallConfig()
}

// pickInstallDisk is the disk the install disk setting names among the
// disks a node in maintenance mode reports: exactly one, or an error that
// lists them. On 1.13, the selector as written in machine.install must
// pick the same disk as the expression.
func (c *call) pickInstallDisk(node string, disks []seenDisk) (seenDisk, phases.Diagnostics) {
	d := c.s.install
	if d.match == nil {
		for _, disk := range disks {
			if disk.devPath == d.device {
				return disk, nil
			}
		}
		return seenDisk{}, phases.Errorf("Install Disk Not Found",
			"Node %s (maintenance mode) has no disk %s, the install disk of the talos provider block (install_disk), so the first install of %s would fail. The disks it reports: %s.",
			node, d.device, c.addr, diskList(disks))
	}
	picked, err := matching(*d.match, disks)
	if why := pickProblem(picked, err); why != "" {
		return seenDisk{}, phases.Errorf("Install Disk Selector Must Match One Disk",
			"install_disk_selector `%s` %s on node %s (maintenance mode). It must match exactly one disk, or the first install of %s fails or writes Talos to the wrong disk. The disks the node reports: %s. Select the disk by what tells it apart (disk.serial, disk.wwid, disk.size, disk.transport, disk.model).",
			d.match.String(), why, node, c.addr, diskList(disks))
	}
	if c.s.carriesCEL() || d.lowered == nil {
		return picked[0], nil
	}
	asWritten, err := matching(*d.lowered, disks)
	if pickProblem(asWritten, err) != "" || asWritten[0].devPath != picked[0].devPath {
		return seenDisk{}, phases.Errorf("Install Disk Selector Changed By Talos 1.13",
			"install_disk_selector `%s` picks %s on node %s, but written as Talos 1.13's machine.install.diskSelector (%s), which Talos reads as `%s`, it picks %s. Add a test that both agree on (such as disk.serial), or pin Talos 1.14. The disks the node reports: %s.",
			d.match.String(), picked[0].what(), node, legacyText(d.legacy), d.lowered.String(), diskNames(asWritten), diskList(disks))
	}
	return picked[0], nil
}

// matching is the disks an expression matches; system_disk is false for
// all: nothing is installed yet.
func matching(expr cel.Expression, disks []seenDisk) ([]seenDisk, error) {
	var out []seenDisk
	for _, d := range disks {
		ok, err := expr.EvalBool(celenv.DiskLocator(), map[string]any{"disk": d.spec, "system_disk": false})
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// pickProblem says why a match is not exactly one disk, "" when it is.
func pickProblem(picked []seenDisk, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("cannot be evaluated (%v)", err)
	case len(picked) == 0:
		return "matches no disk"
	case len(picked) > 1:
		return fmt.Sprintf("matches %d disks: %s", len(picked), diskList(picked))
	}
	return ""
}

func diskNames(ds []seenDisk) string {
	if len(ds) == 0 {
		return "no disk"
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.what()
	}
	return strings.Join(out, ", ")
}

// legacyText is a machine.install.diskSelector as YAML on one line.
func legacyText(sel *v1alpha1.InstallDiskSelector) string {
	var f []string
	add := func(k, v string) {
		if v != "" {
			f = append(f, k+": "+v)
		}
	}
	add("serial", sel.Serial)
	add("wwid", sel.WWID)
	add("model", sel.Model)
	add("modalias", sel.Modalias)
	add("uuid", sel.UUID)
	add("busPath", sel.BusPath)
	add("type", string(sel.Type))
	return "{" + strings.Join(f, ", ") + "}"
}

// installDiskLine is the plan's line on the install disk: the selector and how
// the config carries it, then the disk each node's pick is (by what it
// is: no device name), or who checks it when no node answers yet.
func (s *settings) installDiskLine(picks []string, checkedBy string) string {
	d := s.install
	if d.match == nil {
		return fmt.Sprintf("install disk: %s\n", d.device)
	}
	line := fmt.Sprintf("install disk: selected by `%s`", d.match.String())
	switch {
	case s.carriesCEL():
		line += " (UnattendedInstallConfig's provisioning.diskSelector.match)"
	case d.legacyErr == nil:
		line += fmt.Sprintf(" (Talos 1.13's machine.install has no CEL: written as its diskSelector %s, which Talos reads as `%s`)", legacyText(d.legacy), d.lowered.String())
	}
	if len(picks) > 0 {
		return line + ": " + strings.Join(picks, "; ") + "\n"
	}
	return line + "; " + checkedBy + "\n"
}

// String is the install disk for logs: the device, or the selector.
func (d installDisk) String() string {
	if d.match == nil {
		return d.device
	}
	return "selected by `" + d.match.String() + "`"
}
