package views

import (
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
)

// Demo narrates `migrate-lab demo`: what comes next as a heading, the
// commands it types, the lab's build progress and what it reads of the
// lab, then how it ended. The migrate it runs writes its own output.
type Demo struct {
	v       *View
	heading func(string) string
}

// Demo makes the demo's narrator on v's stdout.
func (v *View) Demo() *Demo {
	d := &Demo{v: v, heading: v.st.bold}
	if v.st.color {
		style := lipgloss.NewRenderer(v.out).NewStyle().Inline(true).Bold(true).Foreground(lipgloss.Color("12"))
		d.heading = func(s string) string { return style.Render(s) }
	}
	return d
}

// Say announces what comes next, as a heading after a blank line.
func (d *Demo) Say(format string, args ...any) {
	fmt.Fprintf(d.v.out, "\n%s\n", d.heading("▶ "+fmt.Sprintf(format, args...)))
}

// Command shows the command line the demo runs next, as a person types it.
func (d *Demo) Command(program string, args []string) {
	fmt.Fprintln(d.v.out, d.v.st.dim("$ "+strings.Join(append([]string{program}, args...), " ")))
}

// Progress shows a line of the lab's log the person waits on (the first
// build of its Kubernetes binaries).
func (d *Demo) Progress(line string) {
	fmt.Fprintln(d.v.out, d.v.st.dim("  "+line))
}

// OldVM shows an old VM as read from the lab's Incus host after the
// rollback: its status and a file of its data.
func (d *Demo) OldVM(name, status, path, fileType string, mode fs.FileMode) {
	fmt.Fprintf(d.v.out, "  %-9s %s  %s (%s %v)\n", name, status, path, fileType, mode)
}

// UnitActive shows a systemd unit found active in an old VM.
func (d *Demo) UnitActive(vm, unit string) {
	fmt.Fprintf(d.v.out, "  %-9s systemctl is-active %s: active\n", vm, unit)
}

// ComposeRunning says a Docker Compose project of an old VM runs again.
func (d *Demo) ComposeRunning(vm, project string) {
	fmt.Fprintf(d.v.out, "  %-9s docker compose ls: %s running\n", vm, project)
}

// Complete ends a demo that went through.
func (d *Demo) Complete(took time.Duration) {
	d.Say("The demo is complete in %s: every phase done, a failure found and resumed, every phase rolled back, the old VMs running with their data.",
		took.Round(time.Second))
}

// Stopped ends a demo that failed or was interrupted: where its files are.
func (d *Demo) Stopped(dir, labLog string) {
	fmt.Fprintf(d.v.out, "\nThe demo stopped: its files stay in %s (the lab's log: %s).\n", dir, labLog)
}

// DemoKept is the lab a demo with --keep leaves running.
type DemoKept struct {
	PID      int    // the lab's process
	LabDir   string // its directory (--dir of migrate-lab env)
	Identity string // the example's age identity
	Runbook  string // the demo's copy of examples/homelab
	LabLog   string
}

// Kept says how to drive the lab the demo left running.
func (d *Demo) Kept(k DemoKept) {
	fmt.Fprintf(d.v.out, `
The lab keeps running (pid %d), with the migration rolled back. To drive it by hand:

  eval "$(migrate-lab env --dir %s)"
  export MIGRATE_AGE_IDENTITY=%s
  cd %s
  migrate plan
  migrate run --phase rehearsal      # then platform, data-apps, host-services, ...
  migrate status
  migrate rollback

Stop it with: kill %d   (its log: %s)
`, k.PID, k.LabDir, k.Identity, k.Runbook, k.PID, k.LabLog)
}

// LabUp is what `migrate-lab serve` serves, once it does.
type LabUp struct {
	Dir, Incus, DataDir string
	// EnvFlag is what `migrate-lab env` needs to find this lab: empty in
	// the default directory, else " --dir DIR".
	EnvFlag string
}

// LabServing says the lab is up and how to point migrate at it.
func (v *View) LabServing(u LabUp) {
	fmt.Fprintf(v.out, "The lab is up in %s: the Incus host at %s (old VMs services, matrix, k3s), its data volume in %s.\n", u.Dir, u.Incus, u.DataDir)
	fmt.Fprintf(v.out, "In another shell, to drive examples/homelab against it:\n\n  eval \"$(migrate-lab env%s)\"\n\nCtrl-C stops it.\n", u.EnvFlag)
}

// LabStopping says the lab stops.
func (v *View) LabStopping() {
	fmt.Fprintln(v.out, "Stopping the lab: the Talos VMs, then the Incus host.")
}

// LabEnv prints the export lines (KEY=VALUE each) for a POSIX shell's
// eval.
func (v *View) LabEnv(vars []string) {
	for _, kv := range vars {
		k, val, _ := strings.Cut(kv, "=")
		fmt.Fprintf(v.out, "export %s=%s\n", k, shellQuote(val))
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
