package incus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestMain: started under the name pluginName (a link to the test
// binary), the test binary is the incus provider as a plugin program, for
// the canary through the pipe. A name, not a variable: the other helper
// processes the tests start inherit the environment.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == pluginName {
		os.Exit(plugin.Serve(incus.TypeName, incus.New()))
	}
	os.Exit(m.Run())
}

const pluginName = "migrate-provider-incus-test"

// applyLog wraps the provider to remember which Applies failed: the
// canary checks leaks, this checks the cases really ran.
type applyLog struct {
	providers.Interface
	mu     *sync.Mutex
	failed map[string][]string // step type -> errors
}

func (a applyLog) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	return a.Interface.(providers.Reverter).Revert(ctx, req)
}

func (a applyLog) Close() error { return a.Interface.(providers.Closer).Close() }

func (a applyLog) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	r := a.Interface.Apply(ctx, req)
	if err := r.Diagnostics.Err(); err != nil {
		a.mu.Lock()
		a.failed[req.Type] = append(a.failed[req.Type], err.Error())
		a.mu.Unlock()
	}
	return r
}

// TestCanary: a secret planted in every input of every step type (marked
// as a sensitive variable marks it), and each case again with every
// string marked, leaves the provider by no field, log or diagnostic,
// against the real daemon, whether the step succeeds or fails; in
// process and through the plugin pipe.
func TestCanary(t *testing.T) {
	t.Parallel()
	// One after the other: the daemon is used by one test at a time
	// (incustest.Hold).
	t.Run("in-process", func(t *testing.T) {
		canary(t, func() providers.Interface { return incus.New() })
	})
	t.Run("plugin", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(t.TempDir(), pluginName)
		if err := os.Symlink(exe, link); err != nil {
			t.Fatal(err)
		}
		canary(t, plugin.Factory(plugin.Program{Name: incus.TypeName, Command: link, Schema: incus.New().Schema()}))
	})
}

func canary(t *testing.T, newProvider func() providers.Interface) {
	c := client(t)
	sens := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	s := unique("canary") // a valid instance name, and the secret
	created := s + "-new"
	cleanupInstance(t, c, created)
	running := launch(t, c, "canary-run", true, nil)
	snaps := launch(t, c, "canary-snap", false, nil)
	for _, name := range []string{"keep-" + s, "del-" + s} {
		if err := c.CreateSnapshot(ctxT(t, 30*time.Second), snaps, name, false); err != nil {
			t.Fatal(err)
		}
	}
	vol := s + "-vol"
	cleanupVolume(t, c, vol)
	share := filepath.Join(t.TempDir(), "share-"+s)
	if err := os.Mkdir(share, 0o755); err != nil {
		t.Fatal(err)
	}
	// incus_exec and incus_file work in a running container of their own.
	box := launch(t, c, "canary-box", true, nil)
	dir := t.TempDir()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, agefile.RecipientsFile), []byte(id.Recipient().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret.conf"), []byte("token = "+s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.PushFile(ctxT(t, 10*time.Second), box, "/root/key-"+s, incusapi.FilePut{Content: strings.NewReader("key " + s + "\n")}); err != nil {
		t.Fatal(err)
	}
	if code, out := execIn(t, c, box, "sh", "-c", `mkdir -p "/root/sync-$0" && echo "$0" > "/root/sync-$0/f-$0"`, s); code != 0 {
		t.Fatalf("making the sync source: %s", out)
	}
	log := applyLog{mu: &sync.Mutex{}, failed: map[string][]string{}}
	h := providertest.Harness{Dir: dir, New: func() providers.Interface {
		l := log
		l.Interface = newProvider()
		return l
	}}
	secret := []string{s}
	providertest.Canary(t, h, append(canaryTable(box), []providertest.CanaryCase{
		{Type: incus.Instance, Secrets: secret, Config: obj(map[string]cty.Value{
			"name": sens(created), "type": str("container"), "image": str(testImage), "memory": sens("128MiB"),
			"description": sens("made for " + s),
			"config":      cty.MapVal(map[string]cty.Value{"user.token": sens(s), "user.plain": str("visible")}),
			"devices":     cty.MapVal(map[string]cty.Value{"data": cty.MapVal(map[string]cty.Value{"type": str("disk"), "source": sens(share), "path": str("/mnt/data")})}),
		})},
		{Type: incus.InstanceState, Secrets: secret, Config: obj(map[string]cty.Value{
			"instance": sens(running), "state": str("stopped"), "snapshot_before": cty.True, "restore_on_rollback": cty.True, "force_after": cty.True,
		})},
		{Type: incus.Snapshot, Secrets: secret, Config: obj(map[string]cty.Value{"instance": sens(snaps), "name": sens("made-" + s)})},
		{Type: incus.Snapshot, Secrets: secret, Config: obj(map[string]cty.Value{"instance": sens(snaps), "name": sens("keep-" + s), "action": str("restore"), "snapshot_before": cty.True})},
		{Type: incus.Snapshot, Secrets: secret, Config: obj(map[string]cty.Value{"instance": sens(snaps), "name": sens("del-" + s), "action": str("delete")})},
		{Type: incus.Volume, Secrets: secret, Config: obj(map[string]cty.Value{
			"name": sens(vol), "size": sens("16MiB"), "config": cty.MapVal(map[string]cty.Value{"user.token": sens(s)}),
		})},
		// The secret as env of a command that prints it, on both streams.
		{Type: incus.Exec, Secrets: secret, Config: obj(map[string]cty.Value{
			"instance": str(box), "command": list("sh", "-c", "echo token=$TOKEN; echo $TOKEN >&2"),
			"env": cty.MapVal(map[string]cty.Value{"TOKEN": sens(s)}), "revert": list("sh", "-c", "echo undo $TOKEN"),
		})},
		// A file holding the secret pushed to a secret path, and pulled
		// back into an age file named after it.
		{Type: incus.File, Secrets: secret, Config: obj(map[string]cty.Value{"instance": str(box), "source": str("secret.conf"), "destination": sens("/root/" + s)})},
		{Type: incus.File, Secrets: secret, Config: obj(map[string]cty.Value{"instance": str(box), "direction": str("pull"), "source": sens("/root/key-" + s), "destination": sens("key-" + s + ".age")})},
		// A tree synced whose paths and file names hold the secret.
		{Type: incus.Sync, Secrets: secret, Config: obj(map[string]cty.Value{"instance": str(box), "source": sens("/root/sync-" + s), "destination": sens("/root/sync-copy-" + s), "final": cty.True})},
		// Failing steps: the daemon's errors name the secret.
		{Type: incus.Exec, Secrets: secret, Config: obj(map[string]cty.Value{
			"instance": str(box), "command": list("sh", "-c", "echo bad $TOKEN; exit 4"), "env": cty.MapVal(map[string]cty.Value{"TOKEN": sens(s)}),
		})},
		{Type: incus.Instance, Secrets: secret, Config: obj(map[string]cty.Value{"name": sens(s + "-bad"), "type": str("container"), "image": sens("no-image-" + s)})},
		{Type: incus.InstanceState, Secrets: secret, Config: obj(map[string]cty.Value{"instance": sens(s + "-none"), "state": str("running")})},
	}...))
	// Each case ran twice; only the failing ones failed, each time.
	want := map[string]int{incus.Instance: 2, incus.InstanceState: 2, incus.Exec: 2}
	for typ, errs := range log.failed {
		if len(errs) != want[typ] {
			t.Errorf("%s: %d failed applies, want %d: %v", typ, len(errs), want[typ], errs)
		}
	}
	if st, err := c.InstanceState(ctxT(t, 10*time.Second), running); err != nil || st.Status != "Running" {
		t.Errorf("the stopped instance was not started again: %v %v", st, err)
	}
}

// canaryTable: each of providertest.Canaries as an incus_exec's env
// value and argument (redacted before the argv is quoted), printed by
// the command and its revert.
func canaryTable(box string) []providertest.CanaryCase {
	var cases []providertest.CanaryCase
	for _, cn := range providertest.Canaries {
		sens := cty.StringVal(cn.Value).Mark(phases.SensitiveMark)
		run, undo := `echo "got $TOKEN"; echo "$1" >&2`, `echo "undo $1"`
		cases = append(cases, providertest.CanaryCase{Type: incus.Exec, Secrets: []string{cn.Value}, Config: obj(map[string]cty.Value{
			"instance": str(box),
			"command":  cty.ListVal([]cty.Value{str("sh"), str("-c"), str(run), str("x"), sens}),
			"env":      cty.MapVal(map[string]cty.Value{"TOKEN": sens}),
			"revert":   cty.ListVal([]cty.Value{str("sh"), str("-c"), str(undo), str("x"), sens}),
		})})
	}
	return cases
}
