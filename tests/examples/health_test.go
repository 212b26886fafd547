package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
)

// TestHomelabJellyfinCrashLoopRollsBack: the old Jellyfin's data is newer
// than the example's image (its system.xml says a newer server ran it
// last), so the new Jellyfin refuses it and crash-loops in the lab's
// node. data-apps fails at the release, at once rather than after its
// timeout, naming the pod, its restarts and the log line where Jellyfin
// names both versions; the phase's health checks do not run; and migrate
// rollback starts the old Jellyfin again in the old VM.
func TestHomelabJellyfinCrashLoopRollsBack(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 33})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	// What a newer Jellyfin leaves: the version that last ran on this data.
	systemXML := filepath.Join(h.Dir(), "incus/instances/services/rootfs/etc/jellyfin/system.xml")
	old := string(must(os.ReadFile(systemXML)))
	newer := strings.Replace(old, "</ServerConfiguration>", "  <PreviousVersionStr>10.99.0</PreviousVersionStr>\n</ServerConfiguration>", 1)
	if newer == old {
		t.Fatalf("the old VM's system.xml has no </ServerConfiguration>:\n%s", old)
	}
	if err := os.WriteFile(systemXML, []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := copyExample(t, "homelab")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
	for _, ph := range []string{"rehearsal", "platform"} {
		run(t, dir, env, "run", "--phase", ph, "--auto-approve")
	}

	cmd := exec.Command(migrate, "run", "--phase", "data-apps", "--auto-approve", "--runbook", dir, "--no-color")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err == nil {
		t.Fatalf("data-apps was done with a Jellyfin that refuses its data:\n%s", tail(text, 80))
	}
	for _, want := range []string{"helm_release.jellyfin: failed: Release Pod Failing", "pod media/jellyfin-", "CrashLoopBackOff",
		"10.99.0", "of its log (the run that ended)", "rollback returns to the previous revision (or uninstalls it)", "Phase data-apps failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the failed data-apps does not say %q", want)
		}
	}
	if t.Failed() {
		t.Logf("its output ends:\n%s", tail(text, 60))
	}
	if strings.Contains(text, "check http_check.jellyfin_health: done") {
		t.Errorf("Jellyfin's health check passed with Jellyfin down:\n%s", tail(text, 80))
	}

	run(t, dir, env, "rollback", "--auto-approve")
	if code := labExec(t, h, "services", "systemctl", "is-active", "jellyfin"); code != 0 {
		t.Errorf("the old Jellyfin is not active after the rollback: systemctl is-active exited %d", code)
	}
}
