package examples

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/home"
)

// TestDemo runs `migrate-lab demo` as `make demo` does, in a directory of its
// own: it exits 0 after every phase of examples/homelab ran against the
// lab (the first two with the runbook as it was before groups, whose
// records today's carries: planned 0 to create), the injected federation failure stopped ingress-matrix and the
// same command resumed it, every phase was rolled back and the three old
// VMs run again with their data. No process of its lab is left.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command(migrateLab, "demo", "--dir", dir, "--address-block", "21", "--no-color")
	cmd.Env = append(os.Environ(), "MIGRATE_AGE_IDENTITY=", "INCUS_SOCKET=", "INCUS_DIR=", "INCUS_CONF=")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("migrate-lab demo: %v\n%s\nthe lab's log ends:\n%s", err, tail(text, 80), tail(string(must(os.ReadFile(filepath.Join(dir, "lab.log")))), 40))
	}
	// In this order: the plan, every phase, the failure, the resumed run,
	// the rollback, the old VMs.
	order := []string{
		"$ migrate plan",
		"Phase rehearsal complete",
		"Phase platform complete",
		// Run with the runbook before groups; today's carries them.
		"# incus_instance.talos moved to group.node.incus_instance.vm",
		"Plan: 0 to create, 0 to update, 0 drifted",
		"14 records moved to their steps' new addresses",
		// The apps' data copied warm, then final and verified.
		"group.jellyfin.incus_sync.warm[\"lib\"]: done",
		"group.jellyfin.incus_exec.stop: done",
		"group.jellyfin.incus_sync.final[\"lib\"]: done",
		"Phase data-apps complete",
		"Killed: signal: killed", // host-services, during Samba's cutover
		"Phase host-services complete",
		"check http_check.federation: failed",
		"Phase ingress-matrix failed",
		"Phase ingress-matrix: failed", // the status
		"Phase ingress-matrix complete",
		"Phase cleanup complete",
		"Rollback complete",
		"services  Running",
		"matrix    Running",
		"k3s       Running",
		"systemctl is-active matrix-synapse: active",
		"Phase rehearsal: rolled back", // the last status
		"The demo is complete",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(text[at:], want)
		if i < 0 {
			t.Fatalf("the demo's output lacks %q after position %d:\n%s", want, at, tail(text, 120))
		}
		at += i + len(want)
	}
	// No phase was done while one of its apps was down: each app answered
	// its own health check, shown passing.
	for _, want := range []string{"check group.jellyfin.http_check.health: done", "/health answered 200, its body containing \"Healthy\"",
		"check group.frigate.http_check.health: done", "/api/version answered 200",
		"check smb_check.samba_shares: done", ":445 lists files, IPC$, media, photos", ":445 opened media as ana: ",
		"check http_check.synapse_client: done", "/_matrix/client/versions answered 200"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	// Each service's window: expected by the plan before its phase ran
	// (from what ran before it), measured by status after.
	for _, want := range []string{"Expected downtime", "  jellyfin: about ", "measured: the median of", "  matrix: about ",
		"kubernetes_job.rehearsal_copy_rate | it measured copied_bytes=134217728"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's plans lack %q", want)
		}
	}
	for _, svc := range []string{"jellyfin", "frigate", "samba", "matrix"} {
		if !regexp.MustCompile(`(?m)^  ` + svc + ` +down [0-9][0-9.hms]* +20`).MatchString(text) {
			t.Errorf("the demo's status shows no measured downtime of %s", svc)
		}
	}
	// The timeline, for a browser: the SVG is well-formed XML, the page
	// holds it, and both show the kill and every service's window.
	for _, name := range []string{"timeline.svg", "timeline.html"} {
		page := string(must(os.ReadFile(filepath.Join(dir, name))))
		svg := page[strings.Index(page, "<svg"):]
		svg = svg[:strings.Index(svg, "</svg>")+len("</svg>")]
		if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
			t.Errorf("%s: its SVG is not well-formed: %v", name, err)
		}
		for _, want := range []string{"killed", "resumed run", "jellyfin: down", "samba: down", "matrix: down", "helm_release.samba"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	// The rehearsal's Job ran on the lab's node: its file is on the data
	// share, read back through the Talos API.
	for _, want := range []string{"Job media/data-share-write completed", "/var/mnt/data/.migrate/rehearsal read through the API",
		"kubernetes_job.rehearsal_write: reverted (nothing to undo: it went with incus_instance.rehearsal_deleted)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, text)
		}
	}
	if got := string(must(os.ReadFile(filepath.Join(home.DataDirIn(filepath.Join(dir, "lab")), ".migrate", "rehearsal")))); got != "written by a pod of the rehearsal\n" {
		t.Errorf("the rehearsal's file on the data share: %q", got)
	}
	if m := regexp.MustCompile(`(?m)^Error:`).FindAllString(text, -1); len(m) != 1 {
		t.Errorf("the demo printed %d errors, want the one of the injected failure:\n%s", len(m), text)
	}
	if procs := processesMentioning(filepath.Join(dir, "lab")); len(procs) > 0 {
		t.Errorf("processes of the demo's lab left: %v", procs)
	}
	// The first config went through the Incus host's API, as the plan
	// said: each Talos VM installed from its config drive, none took a
	// config over the LAN in maintenance mode, and after the platform
	// phase the VM's instance config no longer holds it.
	if !strings.Contains(text, `install: first config through the Incus host's API (first_install = "nocloud"): nothing is sent over the LAN`) {
		t.Error("the demo's plan does not say the first config goes through the Incus host's API")
	}
	if !strings.Contains(text, "its instance config holds no cloud-init.user-data and no config drive any more") {
		t.Error("the demo does not show the Talos VM's config cleared after the platform phase")
	}
	labLog := string(must(os.ReadFile(filepath.Join(dir, "lab.log"))))
	for _, vm := range []string{"rehearsal", "talos"} {
		if !strings.Contains(labLog, "talosvm: VM "+vm+" installed from its config drive") {
			t.Errorf("the lab's log does not show VM %s installed from its config drive:\n%s", vm, tail(labLog, 40))
		}
	}
	if strings.Contains(labLog, "by the maintenance API (ApplyConfiguration)") {
		t.Errorf("a lab node took its first config over the LAN in maintenance mode:\n%s", tail(labLog, 40))
	}
	// The demo's plan chooses the install disk by what it is, never by a
	// device name, and takes the lab's factory (which adds an owner) at
	// its word, showing both IDs.
	plan := text[:strings.Index(text, "Phase rehearsal complete")]
	assertInstallDiskBySelector(t, plan)
	if !strings.Contains(plan, "answered ID "+labSchematicID(t)+" for this schematic; computed locally "+i915SchematicID) {
		t.Errorf("the demo's plan does not show the factory's schematic ID beside the local one:\n%s", plan)
	}
	// The ISO came from the lab's Image Factory: a real file, not an
	// empty one (whose sha256 is e3b0c442...).
	if m := regexp.MustCompile(`downloaded 100% \((\d+) bytes, sha256 ([0-9a-f]{64})\)`).FindStringSubmatch(text); m == nil || m[1] == "0" || strings.HasPrefix(m[2], "e3b0c442") {
		t.Errorf("the demo's output does not show the ISO downloaded from the factory with its size and sha256: %v", m)
	}
	// The cluster's admin key never lay in clear in the runbook: the
	// kubeconfigs were age files (removed by the rollback).
	if !strings.Contains(text, "kubeconfig written, age-encrypted") {
		t.Error("the demo's output does not say the kubeconfig was written age-encrypted")
	}
	for _, f := range clearKeys(t, filepath.Join(dir, "homelab")) {
		t.Errorf("a key in clear under the runbook: %s", f)
	}
}

// clearKeys lists the files under dir that hold a private key or a
// kubeconfig's client key in clear.
func clearKeys(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "client-key-data") || regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`).Match(b) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
