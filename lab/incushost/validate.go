package incushost

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// What the daemon checks of an instance's config and devices before it
// creates or changes one, with its own error texts (lxc/incus:
// internal/instance/config.go, the device validators under
// internal/server/device). The lab holds the rules a runbook meets:
// known keys and their value syntax, container-only and VM-only keys,
// device types and options, the root-only size, and the pools and the
// network that must exist. It does not hold every key the daemon
// knows (see doc.go): an unknown one is refused, as the daemon refuses
// it, so a key the lab lacks shows as a refusal, never as a pass.

// configKeys are the instance config keys, by the kind of value they take.
var configKeys = map[string]keyRule{
	"boot.autostart":              {check: isBool},
	"boot.autostart.delay":        {check: isInt},
	"boot.autostart.priority":     {check: isInt},
	"boot.host_shutdown_timeout":  {check: isInt},
	"boot.stop.priority":          {check: isInt},
	"limits.cpu":                  {check: isCPULimit},
	"limits.cpu.allowance":        {check: anyValue},
	"limits.cpu.priority":         {check: isInt},
	"limits.memory":               {check: isMemoryLimit},
	"limits.disk.priority":        {check: isInt},
	"limits.network.priority":     {check: isInt},
	"migration.stateful":          {check: isBool},
	"security.protection.delete":  {check: isBool},
	"snapshots.schedule":          {check: anyValue},
	"snapshots.schedule.stopped":  {check: isBool},
	"snapshots.pattern":           {check: anyValue},
	"snapshots.expiry":            {check: anyValue},
	"cloud-init.user-data":        {check: isCloudInitUserData},
	"cloud-init.vendor-data":      {check: isCloudInitUserData},
	"cloud-init.network-config":   {check: anyValue},
	"raw.apparmor":                {check: anyValue},
	"security.privileged":         {check: isBool, only: "container"},
	"security.nesting":            {check: isBool, only: "container"},
	"security.idmap.isolated":     {check: isBool, only: "container"},
	"security.idmap.base":         {check: isInt, only: "container"},
	"security.idmap.size":         {check: isInt, only: "container"},
	"raw.lxc":                     {check: anyValue, only: "container"},
	"raw.idmap":                   {check: anyValue, only: "container"},
	"raw.seccomp":                 {check: anyValue, only: "container"},
	"linux.kernel_modules":        {check: anyValue, only: "container"},
	"limits.memory.enforce":       {check: anyValue, only: "container"},
	"limits.memory.swap":          {check: isBool, only: "container"},
	"limits.processes":            {check: isInt, only: "container"},
	"nvidia.runtime":              {check: isBool, only: "container"},
	"nvidia.driver.capabilities":  {check: anyValue, only: "container"},
	"security.secureboot":         {check: isBool, only: "virtual-machine"},
	"security.csm":                {check: isBool, only: "virtual-machine"},
	"security.agent.metrics":      {check: isBool, only: "virtual-machine"},
	"raw.qemu":                    {check: anyValue, only: "virtual-machine"},
	"raw.qemu.conf":               {check: anyValue, only: "virtual-machine"},
	"agent.nic_config":            {check: isBool, only: "virtual-machine"},
	"limits.memory.hugepages":     {check: isBool, only: "virtual-machine"},
	"security.sev":                {check: isBool, only: "virtual-machine"},
	"security.sev.policy.es":      {check: isBool, only: "virtual-machine"},
	"security.sev.session.dh":     {check: anyValue, only: "virtual-machine"},
	"security.sev.session.data":   {check: anyValue, only: "virtual-machine"},
	"security.guestapi":           {check: isBool},
	"security.guestapi.images":    {check: isBool},
	"security.syscalls.intercept": {check: anyValue, only: "container"},
}

// configPrefixes take any value: free-form and the daemon's own keys.
var configPrefixes = []string{"user.", "environment.", "volatile.", "image.", "security.syscalls."}

type keyRule struct {
	check func(string) error
	only  string // "container" or "virtual-machine": the key is unknown for the other
}

// deviceOptions are the options each device type takes; a prefix ends
// with a dot.
var deviceOptions = map[string][]string{
	"disk": {"path", "source", "pool", "size", "size.state", "readonly", "required", "recursive", "propagation", "shift",
		"raw.mount.options", "ceph.cluster_name", "ceph.user_name", "boot.priority", "limits.read", "limits.write",
		"limits.max", "io.cache", "io.bus", "io.threads", "attached", "source.type", "source.snapshot", "initial."},
	"nic": {"name", "nictype", "network", "parent", "hwaddr", "mtu", "host_name", "vlan", "vlan.tagged", "boot.priority",
		"limits.ingress", "limits.egress", "limits.max", "limits.priority", "queue.tx.length", "mode", "io.bus",
		"connected", "attached", "gvrp", "maas.subnet.ipv4", "maas.subnet.ipv6", "security.", "ipv4.", "ipv6."},
	"gpu":          {"gputype", "pci", "id", "vendorid", "productid", "uid", "gid", "mode", "mdev", "mig.ci", "mig.gi", "mig.uuid"},
	"unix-char":    {"source", "path", "major", "minor", "uid", "gid", "mode", "required"},
	"unix-block":   {"source", "path", "major", "minor", "uid", "gid", "mode", "required"},
	"unix-hotplug": {"vendorid", "productid", "subsystem", "uid", "gid", "mode", "required"},
	"usb":          {"vendorid", "productid", "serial", "busnum", "devnum", "uid", "gid", "mode", "required"},
	"proxy":        {"listen", "connect", "bind", "uid", "gid", "mode", "nat", "proxy_protocol", "security.uid", "security.gid"},
	"infiniband":   {"name", "nictype", "parent", "hwaddr", "mtu"},
	"tpm":          {"path", "pathrm"},
	"pci":          {"address"},
	"none":         {},
}

// instanceRejection is what the daemon says of a config and devices it
// would refuse: where is "config" or "devices" (the texts' prefixes
// differ), "" when it accepts them. s.mu must be held (pools, network).
func (s *Server) instanceRejection(typ string, config map[string]string, devices map[string]map[string]string) (msg, where string, code int) {
	for _, k := range slices.Sorted(maps.Keys(config)) {
		if err := checkConfigKey(typ, k, config[k]); err != nil {
			return err.Error(), "config", http.StatusInternalServerError
		}
	}
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		if msg, where, code := s.deviceRejection(name, devices[name]); msg != "" {
			return msg, where, code
		}
	}
	return "", "", 0
}

// createRejection is the error of a creation the daemon refuses, in its
// words (the creation's operation fails with it); nil when it accepts.
func (s *Server) createRejection(in *instance) error {
	msg, where, code := s.instanceRejection(in.Type, in.Config, in.Devices)
	switch where {
	case "":
		return nil
	case "config", "devtype":
		return errf(code, "Failed creating instance record: %s", msg)
	case "pool":
		return errf(code, "Failed creating instance record: Failed initializing instance: %s", msg)
	default:
		return errf(code, "Failed creating instance record: Failed initializing instance: Invalid devices: %s", msg)
	}
}

// updateRejection is the error of a change the daemon refuses (it
// answers the request itself); nil when it accepts.
func (s *Server) updateRejection(typ string, config map[string]string, devices map[string]map[string]string) error {
	msg, where, code := s.instanceRejection(typ, config, devices)
	switch where {
	case "":
		return nil
	case "config":
		return errf(code, "Invalid config: %s", msg)
	case "pool":
		return errf(code, "%s", msg)
	default:
		return errf(code, "Invalid devices: %s", msg)
	}
}

func checkConfigKey(typ, k, v string) error {
	for _, p := range configPrefixes {
		if strings.HasPrefix(k, p) {
			return nil
		}
	}
	rule, ok := configKeys[k]
	if !ok || rule.only != "" && rule.only != typ {
		return fmt.Errorf("Unknown configuration key: %s", k)
	}
	if v == "" { // unsetting a key
		return nil
	}
	return rule.check(v)
}

// deviceRejection checks one device as the daemon does: the message, the
// kind of refusal ("devtype", "pool" or "devices") and its status.
func (s *Server) deviceRejection(name string, d map[string]string) (msg, where string, code int) {
	typ := d["type"]
	opts, ok := deviceOptions[typ]
	if !ok {
		return fmt.Sprintf("Invalid device type %q", typ), "devtype", http.StatusInternalServerError
	}
	failed := func(format string, args ...any) string {
		return fmt.Sprintf("Device validation failed for %q: ", name) + fmt.Sprintf(format, args...)
	}
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if k != "type" && !knownOption(opts, k) {
			return failed("Invalid device option %q", k), "devices", http.StatusInternalServerError
		}
	}
	if v, ok := d["boot.priority"]; ok && v != "" {
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return failed("Invalid value for device option %q: Invalid value for uint32 %q: %v", "boot.priority", v, err), "devices", http.StatusInternalServerError
		}
	}
	switch typ {
	case "disk":
		root := d["path"] == "/" && d["source"] == ""
		if d["size"] != "" && !root {
			return failed("Only the root disk may have a size quota"), "devices", http.StatusInternalServerError
		}
		if p := d["pool"]; p != "" && !s.hasPool(p) {
			return fmt.Sprintf("Failed add validation for device %q: Failed to get storage pool %q: Storage pool not found", name, p), "pool", http.StatusNotFound
		}
		if p, src := d["pool"], d["source"]; p != "" && isVolumeSource(src) && s.volumes[p+"/"+src] == nil {
			return fmt.Sprintf("Failed add validation for device %q: Failed loading custom volume: Storage volume not found", name), "pool", http.StatusNotFound
		}
		if msg := diskSourceRejection(d); msg != "" {
			return failed("%s", msg), "devices", http.StatusInternalServerError
		}
		if src := d["source"]; strings.HasPrefix(src, "/") && d["pool"] == "" && !pathExists(src) {
			return fmt.Sprintf("Failed add validation for device %q: Missing source path %q for disk %q", name, src, name), "pool", http.StatusInternalServerError
		}
	case "nic":
		if n := d["network"]; n != "" && (d["nictype"] != "" || d["parent"] != "") {
			banned := "nictype"
			if d["nictype"] == "" {
				banned = "parent"
			}
			return failed("Failed loading device %q: Cannot use %q property in conjunction with \"network\" property", name, banned), "devices", http.StatusBadRequest
		}
		if n := d["network"]; n != "" && n != s.opts.Network && (n != s.opts.LANPhysical || s.opts.LAN == "") {
			return failed("Failed loading device %q: Failed to load network %q for project \"default\": Network not found", name, n), "devices", http.StatusNotFound
		}
		if msg := nicRejection(d); msg != "" {
			return failed("%s", msg), "devices", http.StatusInternalServerError
		}
	}
	return "", "", 0
}

// diskSourceRejection: the forms of a disk's source the daemon takes
// (internal/server/device/disk.go): a path for the guest or a source,
// and a local source (no pool) absolute. "" when it is valid.
func diskSourceRejection(d map[string]string) string {
	src := d["source"]
	switch {
	case src == "" && d["path"] == "":
		return `Disk entry is missing the required "source" or "path" property`
	case src != "" && d["pool"] == "" && !strings.HasPrefix(src, "/") && !strings.Contains(src, ":"):
		return "Source path must be absolute for local sources"
	case d["pool"] != "" && isConfigDrive(src):
		return fmt.Sprintf("Disk entry with source %q cannot have a \"pool\" property set", src)
	}
	return ""
}

// nicRejection: the options a NIC's type needs, and the syntax of its
// MAC (internal/server/device/nic.go, validate.IsNetworkMAC).
func nicRejection(d map[string]string) string {
	if d["network"] == "" {
		switch d["nictype"] {
		case "bridged", "macvlan", "sriov", "physical", "ipvlan":
			if d["parent"] == "" {
				return `Invalid value for device option "parent": Required value`
			}
		}
	}
	if mac := d["hwaddr"]; mac != "" && !macRE.MatchString(mac) {
		return `Invalid value for device option "hwaddr": Invalid MAC address, must be 6 bytes of hex separated by colons`
	}
	return ""
}

var macRE = regexp.MustCompile(`^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$`)

func pathExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// isVolumeSource: a disk's source names a custom volume of its pool
// unless it is a host path or a remote (ceph:) or typed one ("/" in it).
func isVolumeSource(src string) bool { return src != "" && !strings.ContainsAny(src, "/:") }

func knownOption(opts []string, k string) bool {
	for _, o := range opts {
		if o == k || strings.HasSuffix(o, ".") && strings.HasPrefix(k, o) {
			return true
		}
	}
	return false
}

func anyValue(string) error { return nil }

// isCloudInitUserData is the daemon's validate.IsCloudInitUserData: a
// #cloud-config must be YAML after its header; any other user-data (a
// Talos machine config, a script) is taken as it is.
func isCloudInitUserData(v string) error {
	body, ok := strings.CutPrefix(v, "#cloud-config\n")
	if !ok {
		return nil
	}
	var out any
	if err := yaml.Unmarshal([]byte(body), &out); err != nil {
		return err
	}
	return nil
}

func isBool(v string) error {
	switch strings.ToLower(v) {
	case "true", "false", "1", "0", "yes", "no", "on", "off":
		return nil
	}
	return fmt.Errorf("Invalid value for a boolean %q", v)
}

func isInt(v string) error {
	if _, err := strconv.ParseInt(v, 10, 64); err != nil {
		return fmt.Errorf("Invalid value for an integer %q", v)
	}
	return nil
}

// cpuLimitRE: a count ("2") or a set of CPUs ("0-3,6").
var cpuLimitRE = regexp.MustCompile(`^(\d+|\d+(-\d+)?(,\d+(-\d+)?)*)$`)

func isCPULimit(v string) error {
	if !cpuLimitRE.MatchString(v) {
		return fmt.Errorf("Invalid CPU limit syntax")
	}
	return nil
}

// memoryRE: bytes, a size with a unit ("4GiB", "512MB"), or a share of
// the host ("50%").
var memoryRE = regexp.MustCompile(`^(\d+(\.\d+)?%|\d+(\.\d+)?\s*([KMGTPE]i?B|[kKMGTPE])?|\d+B)$`)

func isMemoryLimit(v string) error {
	if !memoryRE.MatchString(v) {
		return fmt.Errorf("Invalid value: %s", v)
	}
	return nil
}
