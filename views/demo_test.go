package views_test

import (
	"io/fs"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/views"
)

// TestLabEnvQuoting: what `migrate-lab env` prints survives a POSIX
// shell's eval, and a plain path is not quoted.
func TestLabEnvQuoting(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"/tmp/lab/incus", "http://127.0.0.1:8080", "/tmp/a dir/it's", "", "$HOME `x` \"q\""} {
		v, out, _ := newView()
		v.LabEnv([]string{"V=" + s})
		got, err := exec.Command("sh", "-c", out.String()+`printf %s "$V"`).Output()
		if err != nil || string(got) != s {
			t.Errorf("LabEnv(V=%q) printed %s: the shell read %q (%v)", s, out, got, err)
		}
	}
	v, out, _ := newView()
	v.LabEnv([]string{"INCUS_DIR=/tmp/lab/incus", "B=x=y"})
	if want := "export INCUS_DIR=/tmp/lab/incus\nexport B=x=y\n"; out.String() != want {
		t.Errorf("LabEnv:\n%s\nwant:\n%s", out, want)
	}
}

// TestDemoNarration: the demo's headings, commands and findings, without
// color.
func TestDemoNarration(t *testing.T) {
	t.Parallel()
	v, out, errb := newView()
	d := v.Demo()
	d.Say("Phase %s", "rehearsal")
	d.Command("migrate", []string{"run", "--phase", "rehearsal"})
	d.Progress("first run: building")
	d.OldVM("services", "Running", "/var/lib/jellyfin/config/system.xml", "file", fs.FileMode(0o644))
	d.UnitActive("matrix", "matrix-synapse")
	d.Complete(83*time.Second + 400*time.Millisecond)
	want := `
▶ Phase rehearsal
$ migrate run --phase rehearsal
  first run: building
  services  Running  /var/lib/jellyfin/config/system.xml (file -rw-r--r--)
  matrix    systemctl is-active matrix-synapse: active

▶ The demo is complete in 1m23s: every phase done, a failure found and resumed, every phase rolled back, the old VMs running with their data.
`
	if out.String() != want || errb.Len() != 0 {
		t.Errorf("the narration:\n%s\nwant:\n%s\nstderr: %s", out, want, errb)
	}
	out.Reset()
	d.Kept(views.DemoKept{PID: 42, LabDir: "/d/lab", Identity: "/d/homelab/secrets/demo-identity.txt", Runbook: "/d/homelab", LabLog: "/d/lab.log"})
	for _, want := range []string{"The lab keeps running (pid 42)", `eval "$(migrate-lab env --dir /d/lab)"`,
		"export MIGRATE_AGE_IDENTITY=/d/homelab/secrets/demo-identity.txt", "cd /d/homelab", "kill 42   (its log: /d/lab.log)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the --keep hint lacks %q:\n%s", want, out)
		}
	}
	out.Reset()
	d.Stopped("/d", "/d/lab.log")
	if want := "\nThe demo stopped: its files stay in /d (the lab's log: /d/lab.log).\n"; out.String() != want {
		t.Errorf("Stopped: %q", out)
	}
}

// TestLabServing: the lab says where it is and what to eval.
func TestLabServing(t *testing.T) {
	t.Parallel()
	v, out, _ := newView()
	v.LabServing(views.LabUp{Dir: "/l", Incus: "https://127.0.0.1:8443", DataDir: "/l/data", EnvFlag: " --dir /l"})
	v.LabStopping()
	for _, want := range []string{"The lab is up in /l: the Incus host at https://127.0.0.1:8443", `eval "$(migrate-lab env --dir /l)"`, "Ctrl-C stops it.", "Stopping the lab"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lab serve lacks %q:\n%s", want, out)
		}
	}
}
