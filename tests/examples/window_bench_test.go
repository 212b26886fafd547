package examples

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/home"
)

// windowData is the data set behind Jellyfin: windowFiles files of a MiB
// in /var/lib/jellyfin/metadata, of which windowChanged change between
// the warm pass and the cutover (one percent).
const (
	windowFiles   = 480
	windowChanged = 5
)

// BenchmarkHomelabJellyfinWindow measures Jellyfin's downtime in the lab
// home server running examples/homelab, with 480 MiB behind it and one
// percent of it changed between the warm pass and the cutover, twice in
// one run: as the runbook is (warm copy, then the final pass once it is
// stopped), then, after a rollback of data-apps, with the group's warm
// pass switched off (warm = false: all of it copied once it is stopped).
// The windows are the engine's own (migrate status --json: from the start
// of the old Jellyfin's stop to the first pass of the new one's health
// check), so they include the release's start, which both share.
//
// The warm run is stopped as a person would (Ctrl-C) as its warm pass
// starts, the data changed meanwhile, and resumed: the cutover is the
// resumed run.
func BenchmarkHomelabJellyfinWindow(b *testing.B) {
	for b.Loop() {
		warm, cold := jellyfinWindows(b)
		b.ReportMetric(warm.Seconds(), "warm-s")
		b.ReportMetric(cold.Seconds(), "cold-s")
		b.ReportMetric(warm.Seconds()/cold.Seconds(), "warm/cold")
	}
}

func jellyfinWindows(b *testing.B) (warm, cold time.Duration) {
	h, err := home.Start(b.Context(), home.Options{Dir: filepath.Join(b.TempDir(), "lab"), AddressBlock: 44})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	dir := copyExample(b, "homelab")
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+filepath.Join(dir, "secrets/demo-identity.txt"))
	lib := filepath.Join(h.Dir(), "incus/instances/services/rootfs/var/lib/jellyfin/metadata")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	write := func(i int) {
		rand.Read(chunk)
		if err := os.WriteFile(filepath.Join(lib, fmt.Sprintf("item-%03d.jpg", i)), chunk, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range windowFiles {
		write(i)
	}
	for _, ph := range []string{"rehearsal", "platform"} {
		run(b, dir, env, "run", "--phase", ph, "--auto-approve")
	}

	// Warm: stopped as the warm pass starts, the data changed, resumed.
	stopAt(b, dir, env, `group.jellyfin.incus_sync.warm["lib"]`, "run", "--phase", "data-apps", "--auto-approve")
	for i := range windowChanged {
		write(i * (windowFiles / windowChanged))
	}
	out := run(b, dir, env, "run", "--phase", "data-apps", "--auto-approve")
	warm = downtime(b, dir, env, "jellyfin")
	run(b, dir, env, "rollback", "--phase", "data-apps", "--auto-approve")

	// Cold: the same data, the same change, no warm pass.
	main := filepath.Join(dir, "main.hcl")
	src := must(os.ReadFile(main))
	call := "source     = \"./groups/app\"\n    depends_on = [incus_device.services_data, kubernetes_namespace.media]\n    name       = \"jellyfin\"\n"
	if !bytes.Contains(src, []byte(call)) {
		b.Fatalf("main.hcl has no group call of jellyfin as %q", call)
	}
	if err := os.WriteFile(main, bytes.Replace(src, []byte(call), []byte(call+"    warm = false\n"), 1), 0o644); err != nil {
		b.Fatal(err)
	}
	for i := range windowChanged {
		write(i*(windowFiles/windowChanged) + 1)
	}
	out = run(b, dir, env, "run", "--phase", "data-apps", "--auto-approve")
	if strings.Contains(out, "group.jellyfin.incus_sync.warm[") {
		b.Fatalf("warm = false still ran a warm pass:\n%s", out)
	}
	cold = downtime(b, dir, env, "jellyfin")
	run(b, dir, env, "rollback", "--auto-approve")
	return warm, cold
}

// stopAt runs migrate with --json and presses Ctrl-C (SIGINT) once the
// step at address starts: the steps running finish, none starts.
func stopAt(b *testing.B, dir string, env []string, address string, args ...string) {
	b.Helper()
	cmd := exec.Command(migrate, append(args, "--runbook", dir, "--no-color", "--json")...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sent := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e struct{ Kind, Address string }
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind == "step_started" && e.Address == address && !sent {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				b.Fatal(err)
			}
			sent = true
		}
	}
	err = cmd.Wait()
	if !sent {
		b.Fatalf("migrate %s ended (%v) before %s started:\n%s", strings.Join(args, " "), err, address, stderr.String())
	}
}

// downtime is the window migrate status --json gives the service.
func downtime(b *testing.B, dir string, env []string, service string) time.Duration {
	b.Helper()
	var doc struct {
		Services []struct {
			Name         string     `json:"name"`
			DownSince    *time.Time `json:"down_since"`
			ServingSince *time.Time `json:"serving_since"`
		} `json:"services"`
	}
	out := run(b, dir, env, "status", "--json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		b.Fatalf("status --json: %v\n%s", err, out)
	}
	for _, s := range doc.Services {
		if s.Name == service && s.DownSince != nil && s.ServingSince != nil {
			return s.ServingSince.Sub(*s.DownSince)
		}
	}
	b.Fatalf("status --json has no whole window of %s:\n%s", service, out)
	return 0
}
