package incusapi

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe to read while FollowExec writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExecAndFiles: in one running container, a command runs in
// record-output mode with its env, cwd and user, its output followed while
// it runs and its files deleted after; its exit code comes back; it
// cannot be cancelled; files and directories are pushed with a mode and
// owner, read back, listed and deleted.
func TestExecAndFiles(t *testing.T) {
	c := socketClient(t)
	name := launch(t, c, "iapi-exec", true, nil)

	t.Run("exec", func(t *testing.T) {
		ctx := ctxT(t, 90*time.Second)
		e, err := c.StartExec(ctx, name, ExecPost{
			Command:     []string{"sh", "-c", `echo "$FOO in $(pwd) as $(id -u):$(id -g)"; echo oops >&2; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo after; exit 3`},
			Environment: map[string]string{"FOO": "bar"}, Cwd: "/tmp", User: 7, Group: 8,
		})
		if err != nil {
			t.Fatal(err)
		}
		if running, err := c.RunningExecs(ctx, name); err != nil || len(running) != 1 || running[0] != *e {
			t.Errorf("RunningExecs = %+v, %v; want the one started", running, err)
		}
		if err := c.CancelOperation(ctx, e.Operation); !errors.Is(err, ErrNotCancellable) {
			t.Errorf("CancelOperation of an exec: %v, want ErrNotCancellable", err)
		}
		var out, errOut lockedBuffer
		res := make(chan error, 1)
		var code int
		go func() {
			var err error
			code, err = c.FollowExec(ctx, e, &out, &errOut, 100*time.Millisecond)
			res <- err
		}()
		// The first line arrives while the command still waits.
		for !strings.Contains(out.String(), "bar in /tmp as 7:8\n") {
			if ctx.Err() != nil {
				t.Fatalf("the first line never came: %q", out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if strings.Contains(out.String(), "after") {
			t.Fatal("the command went on before it was let go")
		}
		if err := c.PushFile(ctx, name, "/tmp/go", FilePut{Content: strings.NewReader("go\n")}); err != nil {
			t.Fatal(err)
		}
		if err := <-res; err != nil || code != 3 {
			t.Fatalf("FollowExec = %d, %v", code, err)
		}
		if out.String() != "bar in /tmp as 7:8\nafter\n" || errOut.String() != "oops\n" {
			t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
		}
		if running, err := c.RunningExecs(ctx, name); err != nil || len(running) != 0 {
			t.Errorf("RunningExecs after the end = %+v, %v", running, err)
		}
		if _, err := c.ExecOutput(ctx, name, e.Stdout, 0); !IsNotFound(err) {
			t.Errorf("the output file is still there: %v", err)
		}
	})

	t.Run("files", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		if _, err := c.StatFile(ctx, name, "/root/d"); !IsNotFound(err) {
			t.Fatalf("StatFile of a missing path: %v", err)
		}
		if err := c.PushFile(ctx, name, "/root/d", FilePut{Type: "directory", Mode: 0o750, UID: 5, GID: 6}); err != nil {
			t.Fatal(err)
		}
		if err := c.PushFile(ctx, name, "/root/d/f", FilePut{Mode: 0o640, UID: 12, GID: 13, Content: strings.NewReader("hello")}); err != nil {
			t.Fatal(err)
		}
		fi, err := c.StatFile(ctx, name, "/root/d")
		if err != nil || *fi != (FileInfo{Type: "directory", UID: 5, GID: 6, Mode: 0o750}) {
			t.Errorf("StatFile dir = %+v, %v", fi, err)
		}
		fi, r, _, err := c.GetFile(ctx, name, "/root/d/f")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		if string(b) != "hello" || *fi != (FileInfo{Type: "file", UID: 12, GID: 13, Mode: fs.FileMode(0o640)}) {
			t.Errorf("GetFile = %q %+v", b, fi)
		}
		_, _, entries, err := c.GetFile(ctx, name, "/root/d")
		if err != nil || len(entries) != 1 || entries[0] != "f" {
			t.Errorf("GetFile dir = %v, %v", entries, err)
		}
		if err := c.DeleteFile(ctx, name, "/root/d"); err == nil {
			t.Error("a directory that is not empty was deleted")
		}
		for _, p := range []string{"/root/d/f", "/root/d"} {
			if err := c.DeleteFile(ctx, name, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.StatFile(ctx, name, "/root/d"); !IsNotFound(err) {
			t.Errorf("after the delete: %v", err)
		}
	})
}
