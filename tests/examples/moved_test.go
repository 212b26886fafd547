package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
)

// TestHomelabMovedFromBeforeGroups: a state made by examples/homelab as
// it was before groups/ (cmd/migrate-lab/homelab-before-groups.hcl, every step
// written out) is carried into today's runbook by its moved blocks. The
// old one rehearsed and ran the platform and data-apps against the lab;
// rewritten, the plan creates, updates and finds drifted nothing in those
// phases, before and after a run makes the 22 moves, but what came after
// it: the apps' warm and final copies (incus_sync) and image pulls (a
// Job each), which it never had, and their export scripts, which now put those copies in place (their
// markers say they are done: they are not run again).
func TestHomelabMovedFromBeforeGroups(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 61})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	dir := copyExample(t, "homelab")
	today := map[string][]byte{}
	for _, f := range []string{"main.hcl", "moved.hcl"} {
		today[f] = must(os.ReadFile(filepath.Join(dir, f)))
	}
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), must(os.ReadFile(filepath.Join("..", "..", "cmd", "migrate-lab", "homelab-before-groups.hcl"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "moved.hcl")); err != nil {
		t.Fatal(err)
	}
	migrate := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color")...)
		cmd.Env = append(append(os.Environ(), h.Env()...), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("migrate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ran := []string{"rehearsal", "platform", "data-apps"}
	for _, ph := range ran {
		migrate("run", "--phase", ph, "--auto-approve")
	}
	for f, b := range today {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	changes := regexp.MustCompile(`(?m)^  [+~!-] .*$`)
	newer := regexp.MustCompile(`^  (\+ group\.(jellyfin|frigate)\.incus_sync\.(warm|final)\["(lib|config)"\] will run|\+ group\.(jellyfin|frigate)\.kubernetes_job\.pull will run|~ group\.(jellyfin|frigate)\.incus_exec\.export will run again: its inputs changed since it ran)$`)
	for i, when := range []string{"before the moves are made", "after a run made them"} {
		plan := migrate("plan")
		for _, ph := range ran {
			_, section, _ := strings.Cut(plan, "\nPhase "+ph+" (")
			section, _, _ = strings.Cut(section, "\nPhase ")
			var c []string
			for _, line := range changes.FindAllString(section, -1) {
				if i == 1 || !newer.MatchString(line) {
					c = append(c, line)
				}
			}
			if len(c) > 0 {
				t.Errorf("%s, phase %s plans changes:\n%s", when, ph, strings.Join(c, "\n"))
			}
		}
		if i == 0 {
			for _, want := range []string{"22 records moved to their steps' new addresses", "# incus_instance.talos moved to group.node.incus_instance.vm",
				"# helm_release.jellyfin moved to group.jellyfin.helm_release.app"} {
				if !strings.Contains(plan, want) {
					t.Errorf("the plan %s lacks %q", when, want)
				}
			}
			if out := migrate("run", "--phase", "data-apps", "--auto-approve"); !strings.Contains(out, "Plan: 8 to create, 2 to update, 0 drifted") {
				t.Errorf("the run that makes the moves changes something but the six copies, the two image pulls and the two exports:\n%s", out)
			}
		} else if strings.Contains(plan, "records moved") {
			t.Errorf("the moves are planned again after a run made them:\n%s", plan)
		}
	}
}
