package incus_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestSchemaUnchanged: the schema derived from the attribute structs is
// the one written by hand before the SDK, word for word.
func TestSchemaUnchanged(t *testing.T) {
	got := incus.New().Schema()
	providertest.SameAttributes(t, "provider block", got.Provider.Attributes, schema.Provider.Attributes)
	for name, want := range schema.StepTypes {
		g, ok := got.StepTypes[name]
		if !ok {
			t.Errorf("step type %s is missing", name)
			continue
		}
		providertest.SameStepType(t, name, g, want)
	}
}

// schema is the incus provider's schema as written by hand before the SDK.
var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{
		"remote":      {Type: cty.String, Description: "A remote of the incus CLI's configuration (config.yml, servercerts/, client.crt/key in config_dir), such as \"myhost\"; \"local\" is the unix socket."},
		"config_dir":  {Type: cty.String, Description: "The incus CLI's configuration directory, ~/.config/incus by default."},
		"address":     {Type: cty.String, Description: "The daemon's HTTPS URL, such as https://192.168.1.10:8443, instead of a remote."},
		"socket":      {Type: cty.String, Description: "The daemon's unix socket, /var/lib/incus/unix.socket by default."},
		"client_cert": {Type: cty.String, Description: "With address: the client certificate (PEM), relative to the runbook; default config_dir's client.crt."},
		"client_key":  {Type: cty.String, Description: "With address: the client key (PEM), relative to the runbook; default config_dir's client.key."},
		"server_cert": {Type: cty.String, Description: "With address: the server's own certificate (PEM), pinned; without it the system's roots verify the server."},
		"project":     {Type: cty.String, Description: "The Incus project, the daemon's default when unset."},
	}},
	StepTypes: map[string]phases.StepType{
		incus.Instance: {
			Description: "Ensures an Incus instance exists with the given type, image (or empty disk), limits, profiles, config and devices; or, with ensure = \"absent\", that it is deleted (refused for instances kept for rollback before retain_until).",
			Attributes: map[string]phases.Attribute{
				"name":         {Type: cty.String, Description: "The instance name; default the step's name."},
				"ensure":       {Type: cty.String, Description: "\"present\" (default) or \"absent\" (delete it: irreversible)."},
				"type":         {Type: cty.String, Description: "\"virtual-machine\" (default) or \"container\"."},
				"image":        {Type: cty.String, Description: "A local image alias or fingerprint to create it from."},
				"empty":        {Type: cty.Bool, Description: "Create a VM with an empty root disk (to install from an iso device) instead of an image."},
				"cpu":          {Type: cty.Number, Description: "CPUs (limits.cpu)."},
				"memory":       {Type: cty.String, Description: "Memory (limits.memory), such as \"16GiB\"."},
				"profiles":     {Type: cty.List(cty.String), Description: "Profiles, in order; the daemon's default when unset."},
				"config":       {Type: cty.Map(cty.String), Description: "Instance config keys, such as security.secureboot; only the keys listed are managed."},
				"devices":      {Type: cty.Map(cty.Map(cty.String)), Description: "Devices by name, each a map with a type: a host directory shared by virtiofs {type=\"disk\", source=\"/tank/data\", path=\"/var/mnt/data\"} (mount tag incus_NAME), a volume {type=\"disk\", pool=\"default\", source=\"bulk\"}, a GPU {type=\"gpu\", gputype=\"physical\", pci=\"0000:00:02.0\"}, an ISO {type=\"disk\", source=\"/path/talos.iso\", \"boot.priority\"=\"10\"}."},
				"start":        {Type: cty.Bool, Description: "Start the instance once created."},
				"description":  {Type: cty.String, Description: "The instance description, set at creation."},
				"retain_until": {Type: cty.String, Description: "With ensure = \"absent\": the date (YYYY-MM-DD) until which an instance kept for rollback must stay; its deletion is refused until that date has passed."},
				// Added with the address outputs (issue 10).
				"nic":          {Type: cty.String, Description: "The NIC whose addresses the outputs report: a nic device name (or a guest interface name); default the first nic device in name order (eth0 before eth1)."},
				"wait_for":     {Type: cty.String, Description: "\"ipv4\" or \"ipv6\": apply waits until the NIC has a global address of that family (reported by the guest, or else by a DHCP lease of its managed network), so later steps can use it."},
				"wait_timeout": {Type: cty.String, Description: "How long wait_for waits, such as \"5m\"; default \"2m\"."},
			},
			Outputs: map[string]cty.Type{"name": cty.String, "type": cty.String, "status": cty.String, "ipv4": cty.String, "ipv6": cty.String, "mac": cty.String},
		},
		incus.InstanceState: {
			Description: "Stops or starts an instance: gracefully with a timeout (force only when force_after is set), optionally after a snapshot; a stopped instance is kept for rollback, which starts it again.",
			Attributes: map[string]phases.Attribute{
				"instance":            {Type: cty.String, Required: true, Description: "The instance name."},
				"state":               {Type: cty.String, Required: true, Description: "\"stopped\" or \"running\"."},
				"snapshot_before":     {Type: cty.Bool, Description: "Take a snapshot (migrate-STEP-UNIXTIME) just before the change."},
				"keep_for_rollback":   {Type: cty.Bool, Description: "Mark a stopped instance as kept for rollback (user.migrate.keep_for_rollback), so that no cleanup deletes it before its retain_until; true by default."},
				"stop_timeout":        {Type: cty.String, Description: "How long a graceful stop may take, \"30s\" by default."},
				"force_after":         {Type: cty.Bool, Description: "Force the stop when the graceful one times out; otherwise the step fails and the instance keeps running."},
				"restore_on_rollback": {Type: cty.Bool, Description: "Rollback restores the snapshot taken before the change, then starts the instance again."},
			},
			Outputs: map[string]cty.Type{"instance": cty.String, "previous_state": cty.String, "snapshot": cty.String},
		},
		incus.Snapshot: {
			Description: "Creates, restores or deletes a named snapshot of an instance.",
			Attributes: map[string]phases.Attribute{
				"instance":        {Type: cty.String, Required: true, Description: "The instance name."},
				"name":            {Type: cty.String, Required: true, Description: "The snapshot name."},
				"action":          {Type: cty.String, Description: "\"create\" (default; rollback deletes it), \"restore\" or \"delete\" (irreversible)."},
				"snapshot_before": {Type: cty.Bool, Description: "With action = \"restore\": take a snapshot first, so that rollback can restore it; without it a restore cannot be undone."},
			},
			Outputs: map[string]cty.Type{"instance": cty.String, "name": cty.String, "before": cty.String},
		},
		// Added with issue 11: commands and files inside instances.
		incus.Exec: {
			Description: "Runs a command (an argv, no terminal) inside an instance, its output streamed to the log; exactly once across interruptions with creates; rollback runs the revert command.",
			Attributes: map[string]phases.Attribute{
				"instance": {Type: cty.String, Required: true, Description: "The instance to run the command in (it must be running)."},
				"command":  {Type: cty.List(cty.String), Required: true, Description: "The argv to run in the instance; no shell unless the argv asks for one (\"sh\", \"-c\", ...)."},
				"env":      {Type: cty.Map(cty.String), Description: "Environment variables of the command, besides the daemon's (PATH, HOME, ...)."},
				"user":     {Type: cty.Number, Description: "The uid the command runs as; 0 (root) by default."},
				"group":    {Type: cty.Number, Description: "The gid the command runs as; 0 by default."},
				"cwd":      {Type: cty.String, Description: "The working directory in the instance; it must exist."},
				"timeout":  {Type: cty.String, Description: "How long the command may run, \"10m\" by default; past it the step fails."},
				"creates":  {Type: cty.String, Description: "A path in the instance that the command makes: when it exists the command is not run, so a step interrupted after the command finished is not run again."},
				"revert":   {Type: cty.List(cty.String), Description: "The argv rollback runs in the instance, with the same env, user, group and cwd; without it rollback has nothing to undo."},
			},
			Outputs: map[string]cty.Type{"exit_code": cty.Number, "instance": cty.String},
		},
		incus.File: {
			Description: "Pushes a file or directory tree into an instance, or pulls one out (optionally into an age-encrypted file), with its SHA-256 as an output; rollback removes what it created and puts back what it replaced.",
			Attributes: map[string]phases.Attribute{
				"instance":    {Type: cty.String, Required: true, Description: "The instance (running, or a stopped container)."},
				"direction":   {Type: cty.String, Description: "\"push\" (default: from this machine into the instance) or \"pull\" (from the instance to this machine)."},
				"source":      {Type: cty.String, Required: true, Description: "Push: a local file or directory, relative to the runbook. Pull: an absolute path in the instance. A directory copies its whole tree."},
				"destination": {Type: cty.String, Required: true, Description: "Push: an absolute path in the instance. Pull: a local path, relative to the runbook, written 0600; ending in .age (a file only), the content is written age-encrypted to the runbook's .age-recipients and never in clear."},
				"mode":        {Type: cty.String, Description: "Push: the mode of the files in the instance, in octal such as \"0640\"; default each local file's own."},
				"uid":         {Type: cty.Number, Description: "Push: the owner (uid) of what is pushed; 0 by default."},
				"gid":         {Type: cty.Number, Description: "Push: the group (gid) of what is pushed; 0 by default."},
			},
			Outputs: map[string]cty.Type{"sha256": cty.String, "size": cty.Number, "files": cty.Number},
		},
	},
}
