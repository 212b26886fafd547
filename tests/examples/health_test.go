package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
)

// TestHomelabJellyfinCrashLoopRollsBack: a runbook that moves Jellyfin
// into an image older than the old VM's Jellyfin (10.10.7, as migrate
// init read it) fails at plan, naming both versions. Forced past the plan
// (MIGRATE_ALLOW_DOWNGRADE), the new Jellyfin refuses the data a newer
// one left and crash-loops in the lab's node: data-apps fails at the
// release, at once rather than after its timeout, naming the pod, its
// restarts and the log line where Jellyfin names both versions; the
// phase's health checks do not run; and migrate rollback starts the old
// Jellyfin again in the old VM.
func TestHomelabJellyfinCrashLoopRollsBack(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the Debian old VMs' root is built by debootstrap, as root: it needs root, as migrate-lab demo does")
	}
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 33, OldHost: &incushost.OldHost{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
	for _, ph := range []string{"rehearsal", "platform"} {
		run(t, dir, env, "run", "--phase", ph, "--auto-approve")
	}

	const older = "jellyfin/jellyfin:10.9.11"
	plan := exec.Command(migrate, "plan", "--runbook", dir, "--no-color", "--var", "jellyfin_image="+older)
	plan.Env = append(os.Environ(), env...)
	out, err := plan.CombinedOutput()
	if flat := strings.Join(strings.Fields(string(out)), " "); err == nil || !strings.Contains(flat, older+" is older than 10.10.7") {
		t.Fatalf("the plan into an older Jellyfin did not fail naming both versions (%v):\n%s", err, out)
	}

	cmd := exec.Command(migrate, "run", "--phase", "data-apps", "--auto-approve", "--runbook", dir, "--no-color", "--var", "jellyfin_image="+older)
	cmd.Env = append(append(os.Environ(), env...), "MIGRATE_ALLOW_DOWNGRADE=jellyfin/jellyfin")
	out, err = cmd.CombinedOutput()
	text := string(out)
	if err == nil {
		t.Fatalf("data-apps was done with a Jellyfin that refuses its data:\n%s", tail(text, 80))
	}
	for _, want := range []string{"group.jellyfin.helm_release.app: failed: Release Pod Failing", "pod media/jellyfin-", "CrashLoopBackOff",
		"this Jellyfin (10.9.11) is older than the one that last ran with this configuration (10.10.7", "of its log (the run that ended)", "rollback returns to the previous revision (or uninstalls it)", "Phase data-apps failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the failed data-apps does not say %q", want)
		}
	}
	if t.Failed() {
		t.Logf("its output ends:\n%s", tail(text, 60))
	}
	if strings.Contains(text, "check group.jellyfin.http_check.health: done") {
		t.Errorf("Jellyfin's health check passed with Jellyfin down:\n%s", tail(text, 80))
	}

	run(t, dir, env, "rollback", "--auto-approve")
	if code := labExec(t, h, "services", "systemctl", "is-active", "jellyfin"); code != 0 {
		t.Errorf("the old Jellyfin is not active after the rollback: systemctl is-active exited %d", code)
	}
}
