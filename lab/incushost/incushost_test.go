package incushost_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

func TestExecRunsInTheRootfs(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	launch(t, c, "box", true)
	code, out, errs := run(t, c, "box", "sh", "-c", "echo out; echo err >&2; echo made > /root/made; exit 3")
	if code != 3 || out != "out\n" || errs != "err\n" {
		t.Fatalf("exec: code %d, stdout %q, stderr %q", code, out, errs)
	}
	// The command wrote inside the instance, seen by the files API.
	_, r, _, err := c.GetFile(ctxT(t), "box", "/root/made")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "made\n" {
		t.Fatalf("/root/made: %q", b)
	}
	// The host's /usr is there, read-only; its root is the rootfs.
	if code, _, errs := run(t, c, "box", "sh", "-c", "touch /usr/bin/lab-was-here"); code == 0 {
		t.Fatalf("the host's /usr is writable from an instance (%s)", errs)
	}
	if code, out, _ := run(t, c, "box", "cat", "/etc/hostname"); code != 0 || out != "lab\n" {
		t.Fatalf("cat /etc/hostname: %d %q", code, out)
	}
	if code, _, _ := run(t, c, "box", "tar", "-cf", "/tmp/etc.tar", "/etc"); code != 0 {
		t.Fatalf("tar: %d", code)
	}
	// A missing program fails the POST itself, as on the daemon.
	_, err = c.StartExec(ctxT(t), "box", incusapi.ExecPost{Command: []string{"no-such-program"}})
	if err == nil || !strings.Contains(err.Error(), "Command not found") {
		t.Fatalf("a missing program: %v", err)
	}
	// A missing cwd does not fail; user and group apply.
	e, err := c.StartExec(ctxT(t), "box", incusapi.ExecPost{Command: []string{"id", "-u"}, Cwd: "/nowhere", User: 1000, Group: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if code, err := c.FollowExec(ctxT(t), e, &sb, io.Discard, 20*time.Millisecond); err != nil || code != 0 || sb.String() != "1000\n" {
		t.Fatalf("id -u as 1000: %d %q %v", code, sb.String(), err)
	}
}

func TestStopKillsRunningCommands(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	launch(t, c, "box", true)
	e, err := c.StartExec(ctxT(t), "box", incusapi.ExecPost{Command: []string{"sh", "-c", "echo started; sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	// The output file is readable while it runs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := c.ExecOutput(ctxT(t), "box", e.Stdout, 0)
		if err == nil && string(b) == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the output of a running command: %q %v", b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The instance's commands share its init's PID namespace: one sees
	// another (once sh, which said "started", has started sleep).
	for {
		code, out, _ := run(t, c, "box", "pidof", "sleep")
		if code == 0 && out != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pidof sleep from a second command: %d %q", code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.CancelOperation(ctxT(t), e.Operation); !errors.Is(err, incusapi.ErrNotCancellable) {
		t.Fatalf("cancelling an exec: %v", err)
	}
	running, err := c.RunningExecs(ctxT(t), "box")
	if err != nil || len(running) != 1 || running[0].Operation != e.Operation {
		t.Fatalf("RunningExecs: %v %v", running, err)
	}
	start := time.Now()
	if err := c.SetState(ctxT(t), "box", incusapi.InstanceStatePut{Action: "stop", Timeout: 5}); err != nil {
		t.Fatal(err)
	}
	code, err := c.WaitExec(ctxT(t), e)
	if err != nil || code != 137 {
		t.Fatalf("a command of a stopped instance: code %d, %v", code, err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("the stop took %s", time.Since(start))
	}
	if _, err := c.StartExec(ctxT(t), "box", incusapi.ExecPost{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("exec in a stopped instance: %v", err)
	}
}

func TestStateChangesAsTheDaemonWordsThem(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	launch(t, c, "box", false)
	if err := c.SetState(ctxT(t), "box", incusapi.InstanceStatePut{Action: "stop", Force: true}); !incusapi.IsAlreadyInState(err) {
		t.Fatalf("stopping a stopped instance: %v", err)
	}
	if err := c.SetState(ctxT(t), "box", incusapi.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetState(ctxT(t), "box", incusapi.InstanceStatePut{Action: "start"}); !incusapi.IsAlreadyInState(err) {
		t.Fatalf("starting a running instance: %v", err)
	}
	if err := c.DeleteInstance(ctxT(t), "box"); err == nil || !strings.Contains(err.Error(), "running") {
		t.Fatalf("deleting a running instance: %v", err)
	}
	st, err := c.InstanceState(ctxT(t), "box")
	if err != nil || st.Status != "Running" {
		t.Fatalf("state: %+v %v", st, err)
	}
	if _, _, err := c.Instance(ctxT(t), "nothing"); !incusapi.IsNotFound(err) {
		t.Fatalf("an unknown instance: %v", err)
	}
	// ETag: an update from a stale read is refused with 412.
	i, etag, err := c.Instance(ctxT(t), "box")
	if err != nil {
		t.Fatal(err)
	}
	put := i.Put()
	put.Config["user.a"] = "1"
	if err := c.UpdateInstance(ctxT(t), "box", put, etag); err != nil {
		t.Fatal(err)
	}
	put.Config["user.a"] = "2"
	if err := c.UpdateInstance(ctxT(t), "box", put, etag); !errors.Is(err, incusapi.ErrConflict) {
		t.Fatalf("an update with a stale ETag: %v", err)
	}
	if i = inst(t, c, "box"); i.Config["user.a"] != "1" {
		t.Fatalf("config after the refused update: %v", i.Config)
	}
	if err := c.SetState(ctxT(t), "box", incusapi.InstanceStatePut{Action: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteInstance(ctxT(t), "box"); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Instances(ctxT(t)); err != nil || len(list) != 0 {
		t.Fatalf("instances after the delete: %v %v", list, err)
	}
}

func inst(t *testing.T, c *incusapi.Client, name string) *incusapi.Instance {
	t.Helper()
	i, _, err := c.Instance(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func TestSnapshotRestoreOfARunningInstance(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	launch(t, c, "box", true)
	push := func(body string) {
		if err := c.PushFile(ctxT(t), "box", "/root/data", incusapi.FilePut{Content: strings.NewReader(body), Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
	}
	push("before\n")
	if err := c.CreateSnapshot(ctxT(t), "box", "snap0", false); err != nil {
		t.Fatal(err)
	}
	push("after\n")
	if err := c.CreateSnapshot(ctxT(t), "box", "snap0", false); err == nil {
		t.Fatal("a second snapshot of the same name was made")
	}
	if err := c.RestoreSnapshot(ctxT(t), "box", "snap0"); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, c, "box", "cat", "/root/data"); code != 0 || out != "before\n" {
		t.Fatalf("after the restore: %d %q", code, out)
	}
	if i := inst(t, c, "box"); i.Status != "Running" {
		t.Fatalf("a restored running instance is %s", i.Status)
	}
	list, err := c.Snapshots(ctxT(t), "box")
	if err != nil || len(list) != 1 || list[0].Name != "snap0" {
		t.Fatalf("snapshots: %v %v", list, err)
	}
	if err := c.DeleteSnapshot(ctxT(t), "box", "snap0"); err != nil {
		t.Fatal(err)
	}
	if list, _ := c.Snapshots(ctxT(t), "box"); len(list) != 0 {
		t.Fatalf("snapshots after the delete: %v", list)
	}
}

func TestFilesAPI(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	launch(t, c, "box", false) // a stopped container's files are served too
	ctx := ctxT(t)
	if err := c.PushFile(ctx, "box", "/srv/x/file", incusapi.FilePut{Content: strings.NewReader("x")}); !incusapi.IsNotFound(err) {
		t.Fatalf("a push into a missing directory: %v", err)
	}
	if err := c.PushFile(ctx, "box", "/srv", incusapi.FilePut{Type: "directory", Mode: 0o750, UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := c.PushFile(ctx, "box", "/srv/f", incusapi.FilePut{Content: strings.NewReader("one"), Mode: 0o600, UID: 33, GID: 33}); err != nil {
		t.Fatal(err)
	}
	// An overwrite keeps mode and owner.
	if err := c.PushFile(ctx, "box", "/srv/f", incusapi.FilePut{Content: strings.NewReader("two"), Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	fi, r, _, err := c.GetFile(ctx, "box", "/srv/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "two" || fi.Type != "file" || fi.Mode != 0o600 || fi.UID != 33 || fi.GID != 33 {
		t.Fatalf("/srv/f: %q %+v", b, fi)
	}
	fi, r, names, err := c.GetFile(ctx, "box", "/srv")
	if err != nil || r != nil || fi.Type != "directory" || fi.Mode != 0o750 || len(names) != 1 || names[0] != "f" {
		t.Fatalf("/srv: %+v %v %v", fi, names, err)
	}
	if err := c.DeleteFile(ctx, "box", "/srv"); err == nil {
		t.Fatal("a directory that is not empty was deleted")
	}
	if err := c.DeleteFile(ctx, "box", "/srv/f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, "box", "/srv/f"); !incusapi.IsNotFound(err) {
		t.Fatalf("a deleted file: %v", err)
	}
	// Nothing outside the rootfs: .. and symlinks stay inside.
	if _, _, _, err := c.GetFile(ctx, "box", "/../../../../etc/passwd"); !incusapi.IsNotFound(err) {
		t.Fatalf("a path above the root: %v", err)
	}
	if err := c.PushFile(ctx, "box", "/root/out", incusapi.FilePut{Type: "symlink", Content: strings.NewReader("/../../../../../etc")}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.GetFile(ctx, "box", "/root/out/passwd"); err == nil {
		t.Fatal("a symlink led out of the rootfs")
	}
}

func TestDiskDevicesAreBindMounts(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	share := t.TempDir()
	err := c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: "box", Type: "container", Start: true,
		Source:      incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"data": {"type": "disk", "source": share, "path": "/var/mnt/data"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, c, "box", "sh", "-c", "echo from-the-instance > /var/mnt/data/f"); code != 0 {
		t.Fatalf("writing to the share: %d %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(share, "f")); err != nil || string(b) != "from-the-instance\n" {
		t.Fatalf("the share on the host: %q %v", b, err)
	}
	err = c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: "broken", Type: "container",
		Source:      incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"data": {"type": "disk", "source": "/nonexistent/lab", "path": "/mnt"}}}})
	if err == nil || !strings.Contains(err.Error(), `Missing source path "/nonexistent/lab"`) {
		t.Fatalf("a disk without its source: %v", err)
	}
}
