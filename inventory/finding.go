package inventory

// Severities of a finding.
const (
	// Blocker: the runbook as written would fail, or would lose
	// something: fix it before running.
	Blocker = "blocker"
	// Warning: it would run, but something is likely not what you want.
	Warning = "warning"
	// Info: worth knowing; nothing to change.
	Info = "info"
	// Guess: a value the runbook had to guess; check it (its TODO).
	Guess = "guess"
)

// Finding is one thing the inventory noticed, with what to do about it.
type Finding struct {
	Code     string `json:"code"`     // stable, e.g. "vm-no-gpu"
	Severity string `json:"severity"` // Blocker, Warning, Info or Guess
	Subject  string `json:"subject"`  // what it is about: "instance services", "pool local", "variable node_address"
	Seen     string `json:"seen"`     // what was seen
	Do       string `json:"do"`       // what to do
	// Steps are the runbook's steps it concerns (examples/homelab's
	// addresses): migrate init marks them TODO in main.hcl.
	Steps []string `json:"steps,omitempty"`
}

// Codes of the findings.
const (
	CodeVMNoGPU          = "vm-no-gpu"
	CodeNoHostGPU        = "host-no-gpu"
	CodeGPUInUse         = "gpu-in-use"
	CodeGPUDriver        = "gpu-driver"
	CodeNoAgent          = "vm-no-agent"
	CodeAgentUnknown     = "vm-agent-unknown"
	CodeAutostart        = "autostart"
	CodePoolRoom         = "pool-room"
	CodePoolMissing      = "pool-missing"
	CodeNoLANBridge      = "no-lan-bridge"
	CodeVolumeAttached   = "volume-attached"
	CodeNoDataVolume     = "no-data-volume"
	CodeRoleMissing      = "role-missing"
	CodeNotInMove        = "not-in-move"
	CodeGuess            = "guess"
	CodeTODO             = "todo"
	CodeExistingSnapshot = "old-snapshots"
	CodeAppInstall       = "app-install"      // how an app is installed, as read
	CodeAppUnread        = "app-unread"       // what of an app could not be read
	CodeImageNewer       = "image-newer"      // the old VM runs a newer release than the example's image
	CodeSynapsePostgres  = "synapse-postgres" // Synapse on PostgreSQL
	CodeNoSQLite3        = "no-sqlite3"       // no sqlite3 program in Synapse's VM
	CodeHWAccelOff       = "hwaccel-off"      // an app decodes on the CPU
	CodeCompose          = "compose"          // an app runs as a Compose project
	CodeService          = "service"          // Frigate runs as a systemd unit of its own
	CodeConfD            = "conf-d"           // an app's config is split over included files
)

// Count counts the findings of a severity.
func Count(fs []Finding, severity string) int {
	n := 0
	for _, f := range fs {
		if f.Severity == severity {
			n++
		}
	}
	return n
}
