package talos

import (
	"context"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/homelab-migrate/migrate/phases"
)

// seenDisk is a disk as the node reports it (block.Disk, namespace
// runtime: what talosctl get disks --insecure lists).
type seenDisk struct {
	devPath   string
	size      uint64
	pretty    string
	model     string
	serial    string
	transport string
	spec      *blockpb.DiskSpec // what CEL's disk variable is on a node
}

func (d seenDisk) String() string {
	s := fmt.Sprintf("%s (%s", d.devPath, d.pretty)
	if d.model != "" {
		s += ", " + d.model
	}
	if d.serial != "" {
		s += ", serial " + d.serial
	}
	return s + ")"
}

// what says which disk it is without its device name: its size,
// transport, model and serial.
func (d seenDisk) what() string {
	s := "the " + d.pretty
	if d.transport != "" {
		s += " " + d.transport
	}
	s += " disk"
	var more []string
	if d.model != "" {
		more = append(more, d.model)
	}
	if d.serial != "" {
		more = append(more, "serial "+d.serial)
	}
	if len(more) > 0 {
		s += " (" + strings.Join(more, ", ") + ")"
	}
	return s
}

func diskList(ds []seenDisk) string {
	if len(ds) == 0 {
		return "none"
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return strings.Join(out, ", ")
}

// maintenanceDisks reads the disks of a node in maintenance mode over the
// insecure connection, through the resource API.
func maintenanceDisks(ctx context.Context, addr string) ([]seenDisk, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	c, err := insecureClient(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close() //nolint:errcheck
	list, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return nil, apiErr("COSI List block.Disk", err)
	}
	var out []seenDisk
	for d := range list.All() {
		spec := &blockpb.DiskSpec{}
		if err := proto.ResourceSpecToProto(d, spec); err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Metadata().ID(), err)
		}
		t := d.TypedSpec()
		out = append(out, seenDisk{devPath: t.DevPath, size: t.Size, pretty: t.PrettySize, model: t.Model, serial: t.Serial, transport: t.Transport, spec: spec})
	}
	return out, nil
}

// checkDisks checks, before the first install writes anything, that the
// install disk setting picks exactly one disk (pickInstallDisk) and that
// each UserVolumeConfig's disk selector matches exactly one disk,
// evaluated as the node's volume manager does (machinery's DiskLocator
// CEL environment). system_disk is what it will be once installed: true
// for the install disk only. It says which disk the install takes.
func (c *call) checkDisks(node string, r *rendered, disks []seenDisk) (string, phases.Diagnostics) {
	sys, diags := c.pickInstallDisk(node, disks)
	install := sys.devPath
	env := celenv.DiskLocator()
	for _, uv := range r.cfg.UserVolumeConfigs() {
		sel, ok := uv.Provisioning().DiskSelector().Get()
		if !ok || sel.IsZero() {
			continue
		}
		var matched []seenDisk
		var evalErr error
		for _, d := range disks {
			ok, err := sel.EvalBool(env, map[string]any{"disk": d.spec, "system_disk": d.devPath == install})
			if err != nil {
				evalErr = err
				break
			}
			if ok {
				matched = append(matched, d)
			}
		}
		var at *phases.Range
		where := "in the patches"
		if ls := findKey(r.files, "UserVolumeConfig", uv.Name(), "match"); len(ls) > 0 {
			at, where = ls[0].rng(), "at "+ls[0].String()
		}
		var why string
		switch {
		case evalErr != nil:
			why = fmt.Sprintf("cannot be evaluated: %v", evalErr)
		case len(matched) == 0:
			why = "matches no disk"
		case len(matched) > 1:
			why = fmt.Sprintf("matches %d disks: %s", len(matched), diskList(matched))
		default:
			continue
		}
		diags = append(diags, phases.Diagnostics{{Severity: phases.Error, Summary: "Disk Selector Must Match One Disk", Subject: at,
			Detail: fmt.Sprintf("The disk selector of UserVolumeConfig %q %s, %q, %s on node %s (system_disk is the install disk %s). It must match exactly one disk, or the volume is provisioned on none or on the wrong one. The disks the node reports: %s.",
				uv.Name(), where, sel.String(), why, node, install, diskList(disks))}}...)
	}
	return sys.what(), diags
}
