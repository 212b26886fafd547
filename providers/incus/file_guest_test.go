package incus_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// A VM's directory listings come from its guest agent, which the daemon
// passes on as they are: a compromised guest can answer names that leave
// their directory, a directory that contains itself, or a million names.
// The daemon never lists such names for a container, so these tests play
// the hostile agent with the lab's host (lab/incushost SetGuestAgent).

// hostileVM starts a lab host with one running VM whose /data holds
// ok.txt, and whose / holds escape (where "../escape" leads).
func hostileVM(t *testing.T) (*incushost.Server, *incusapi.Client, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := incushost.New(incushost.Options{Dir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	img := t.TempDir()
	if err := incushost.Busybox(img); err != nil {
		t.Fatal(err)
	}
	if err := s.ImportImage("busybox", img); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "unix.socket")
	if err := s.Listen(sock); err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(incusapi.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := ctxT(t, 60*time.Second)
	if err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "oldvm", Type: "virtual-machine", Start: true,
		Source: incusapi.InstanceSource{Type: "image", Alias: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{"/data/ok.txt": "fine\n", "/escape": "written by the guest\n"} {
		if err := c.PushFile(ctx, "oldvm", filepath.Dir(p), incusapi.FilePut{Type: "directory", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
		if err := c.PushFile(ctx, "oldvm", p, incusapi.FilePut{Mode: 0o644, Content: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	return s, c, sock
}

// world is every file and directory under dir, with a file's SHA-256.
func world(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case de.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(h[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// changedOutside lists what changed in the world outside the destination.
func changedOutside(before, after map[string]string, dest string) []string {
	var out []string
	inDest := func(rel string) bool { return rel == dest || strings.HasPrefix(rel, dest+string(filepath.Separator)) }
	for rel, v := range after {
		if !inDest(rel) && before[rel] != v {
			out = append(out, "+ "+rel)
		}
	}
	for rel := range before {
		if _, ok := after[rel]; !ok && !inDest(rel) {
			out = append(out, "- "+rel)
		}
	}
	return out
}

// TestFilePullHostileGuest: a VM whose agent answers names that leave
// their directory, a loop or a huge listing has its pull refused with
// the instance and the directory named, and nothing written anywhere;
// the same VM answering honestly is pulled into its destination only.
func TestFilePullHostileGuest(t *testing.T) {
	t.Parallel()
	lab, _, sock := hostileVM(t)
	parent := t.TempDir() // the world: the runbook's directory and beside it
	runbook := filepath.Join(parent, "runbook")
	writeFile(t, filepath.Join(parent, "keep.txt"), "the user's\n", 0o644)
	writeFile(t, filepath.Join(runbook, "main.hcl"), "# runbook\n", 0o644)
	p := provider(t, map[string]cty.Value{"socket": str(sock)})
	dest := filepath.Join(runbook, "pulled")

	huge := make([]string, 100_001)
	for i := range huge {
		huge[i] = fmt.Sprintf("f%06d", i)
	}
	for _, tc := range []struct {
		name  string
		agent incushost.GuestAgent
		why   string
	}{
		{"dotdot", listing("/data", "ok.txt", "../../escape"), `the name "../../escape"`},
		// (each stays inside parent on the code that joined them: a run
		// of this test on it leaves nothing outside its temporary files)
		{"down then up", listing("/data", "sub/../../../escape"), `"sub/../../../escape"`},
		{"dotdot alone", listing("/data", ".."), `the name ".."`},
		{"dot", listing("/data", "."), `the name "."`},
		{"empty", listing("/data", ""), `the name ""`},
		{"slash", listing("/data", "a/b"), `the name "a/b"`},
		{"dir then up", listing("/data", "x/.."), `the name "x/.."`},
		{"nul", listing("/data", "a\x00b"), `the name "a\x00b"`},
		{"twice", listing("/data", "ok.txt", "ok.txt"), `"ok.txt" twice`},
		{"loop", func(p string) ([]string, bool) {
			if p == "/data" || strings.HasSuffix(p, "/loop") {
				return []string{"loop"}, true
			}
			return nil, false
		}, "deeper than 64 directories"},
		{"huge", listing("/data", huge...), "more than 100000 entries (max_files)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := lab.SetGuestAgent("oldvm", tc.agent); err != nil {
				t.Fatal(err)
			}
			before := world(t, parent)
			s := newStep(t, p, incus.File, "data", map[string]cty.Value{
				"instance": str("oldvm"), "direction": str("pull"), "source": str("/data"), "destination": str(dest)})
			// A bounded context: a walk that follows a loop must not
			// stall the suite (it did, before the bounds).
			ctx := ctxT(t, 30*time.Second)
			plan := p.Plan(ctx, providers.PlanRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Action: providers.Create})
			wantDiag(t, plan.Diagnostics, "Listing Refused", "oldvm:/data", tc.why, "Nothing was copied")
			r, log := s.apply(ctx, nil, nil)
			wantDiag(t, r.Diagnostics, "Listing Refused", "oldvm:/data", tc.why)
			if r.Revert != nil && strings.Contains(string(r.Revert.Data), "escape") {
				t.Errorf("the revert data names a guest's path: %s", r.Revert.Data)
			}
			if diff := changedOutside(before, world(t, parent), ""); len(diff) > 0 {
				t.Errorf("a refused pull changed the world: %v\nlog:\n%s", diff, log)
			}
		})
	}

	t.Run("honest", func(t *testing.T) {
		if err := lab.SetGuestAgent("oldvm", nil); err != nil {
			t.Fatal(err)
		}
		before := world(t, parent)
		s := newStep(t, p, incus.File, "data", map[string]cty.Value{
			"instance": str("oldvm"), "direction": str("pull"), "source": str("/data"), "destination": str(dest)})
		s.mustApply(s.mustPlan(nil).Private, nil)
		after := world(t, parent)
		rel, _ := filepath.Rel(parent, dest)
		if diff := changedOutside(before, after, rel); len(diff) > 0 {
			t.Errorf("the pull changed the world outside %s: %v", rel, diff)
		}
		if got, err := os.ReadFile(filepath.Join(dest, "ok.txt")); err != nil || string(got) != "fine\n" {
			t.Errorf("pulled ok.txt = %q, %v", got, err)
		}
		if n := len(after) - len(before); n != 2 {
			t.Errorf("the pull made %d entries, want 2 (the directory and ok.txt): %v", n, slicesOfKeys(after))
		}
	})
}

// listing is an agent that answers names for the directory dir.
func listing(dir string, names ...string) incushost.GuestAgent {
	return func(p string) ([]string, bool) {
		if p == dir {
			return names, true
		}
		return nil, false
	}
}

func slicesOfKeys(m map[string]string) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestGuestAgentOnlyForVMs: the lab refuses to make a container's files
// answer through an agent, as the daemon reads a container's directories
// itself.
func TestGuestAgentOnlyForVMs(t *testing.T) {
	t.Parallel()
	lab, c, _ := hostileVM(t)
	if err := c.CreateInstance(ctxT(t, 60*time.Second), incusapi.InstancesPost{Name: "ct", Type: "container",
		Source: incusapi.InstanceSource{Type: "image", Alias: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	if err := lab.SetGuestAgent("ct", listing("/", "..")); err == nil || !strings.Contains(err.Error(), "only a VM") {
		t.Errorf("SetGuestAgent on a container: %v", err)
	}
}
