package crash_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// An incus_file step that replaces a user's file moves it aside first
// (NAME.migrate-orig) and puts it back at rollback. Killed with SIGKILL
// in the middle of that replace, then resumed and rolled back, the user's
// file must be back as it was, with no .migrate-orig (nor temporary
// file) left: the resumed run once took the file for one it created, and
// rollback deleted it. Rolled back at once, without the run resumed, the
// same: the step's record said how to undo the replace before it began.
//
// The kill comes at a chosen point, not at a random time: the Incus API
// is served by the lab's host in this process, through a gate that holds
// the request the test names until migrate is killed.

// gate passes requests to the lab's API, except the one hold matches: it
// is held (after half its body, when cut) until release.
type gate struct {
	next    http.Handler
	mu      sync.Mutex
	hold    func(r *http.Request) bool
	cut     bool          // pass the held request's body on in part first
	held    chan struct{} // closed when the held request is held
	release chan struct{}
	once    sync.Once
}

func (g *gate) holding(hold func(*http.Request) bool, cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.cut = hold, cut
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hold, cut := g.hold, g.cut
	g.mu.Unlock()
	if hold == nil || !hold(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	if !cut {
		g.once.Do(func() { close(g.held) })
		<-g.release
		http.Error(w, "held", http.StatusServiceUnavailable)
		return
	}
	r.Body = &cutBody{r: r.Body, g: g}
	g.next.ServeHTTP(w, r)
}

// cutBody gives a few bytes of a request's body, then holds until
// release and fails: a client killed in the middle of its upload.
type cutBody struct {
	r    io.ReadCloser
	g    *gate
	sent bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return b.r.Read(p[:min(len(p), 5)])
	}
	// Asked again: the first bytes were written.
	b.g.once.Do(func() { close(b.g.held) })
	<-b.g.release
	return 0, io.ErrUnexpectedEOF
}

func (b *cutBody) Close() error { return b.r.Close() }

// filesReq reports whether r is a files API request of method for path.
func filesReq(r *http.Request, method, path string) bool {
	return r.Method == method && strings.HasSuffix(r.URL.Path, "/files") && r.URL.Query().Get("path") == path
}

func TestIncusFileKilledMidReplace(t *testing.T) {
	const userLocal, userGuest = "the user's own local file\n", "the user's own file in the guest\n"
	for _, tc := range []struct {
		name      string
		direction string
		cut       bool
		// hold names the request held when migrate is killed.
		hold func(rb string) func(*http.Request) bool
		// killed checks the world is the one the case means.
		killed func(t *testing.T, rb string, c *incusapi.Client)
	}{
		{
			name: "pull, moved aside, new file being written", direction: "pull",
			hold: func(rb string) func(*http.Request) bool {
				return func(r *http.Request) bool {
					_, err := os.Lstat(filepath.Join(rb, "app.conf.migrate-orig"))
					return err == nil && filesReq(r, "GET", "/etc/app.conf")
				}
			},
			killed: func(t *testing.T, rb string, _ *incusapi.Client) {
				if _, err := os.Lstat(filepath.Join(rb, "app.conf")); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("killed mid-replace, app.conf should be moved aside: %v", err)
				}
			},
		},
		{
			name: "push, removed in the guest, new file not pushed", direction: "push",
			hold: func(string) func(*http.Request) bool {
				return func(r *http.Request) bool { return filesReq(r, "POST", "/etc/app.conf") }
			},
			killed: func(t *testing.T, _ string, c *incusapi.Client) {
				if _, err := c.StatFile(context.Background(), "box", "/etc/app.conf"); !incusapi.IsNotFound(err) {
					t.Fatalf("killed mid-replace, /etc/app.conf should be removed: %v", err)
				}
			},
		},
		{
			name: "push, copy to .migrate-orig cut short", direction: "push", cut: true,
			hold: func(string) func(*http.Request) bool {
				return func(r *http.Request) bool { return filesReq(r, "POST", "/etc/app.conf.migrate-orig") }
			},
			killed: func(t *testing.T, _ string, c *incusapi.Client) {
				if got := guestFile(t, c, "/etc/app.conf.migrate-orig"); got != userGuest[:5] {
					t.Fatalf("killed mid-copy, .migrate-orig should hold a part of the file: %q", got)
				}
			},
		},
	} {
		for _, resume := range []bool{true, false} {
			name := tc.name + ", resumed then rolled back"
			if !resume {
				name = tc.name + ", rolled back at once"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				root := t.TempDir()
				rb := filepath.Join(root, "runbook")
				g, c, sock := gatedLab(t, root)
				if err := c.PushFile(context.Background(), "box", "/etc/app.conf", incusapi.FilePut{Mode: 0o640, Content: strings.NewReader(userGuest)}); err != nil {
					t.Fatal(err)
				}
				var step string
				if tc.direction == "pull" {
					writeLocal(t, filepath.Join(rb, "app.conf"), userLocal)
					if err := c.PushFile(context.Background(), "box", "/etc/app.conf", incusapi.FilePut{Content: strings.NewReader("the guest's newer config\n")}); err != nil {
						t.Fatal(err)
					}
					step = `direction = "pull"
    source = "/etc/app.conf"
    destination = "app.conf"`
				} else {
					writeLocal(t, filepath.Join(rb, "new.conf"), "pushed by migrate\n")
					step = `source = "new.conf"
    destination = "/etc/app.conf"`
				}
				writeLocal(t, filepath.Join(rb, "main.hcl"), fmt.Sprintf(`provider "incus" "lab" {
  socket = %q
}

phase "copy" {
  step "incus_file" "conf" {
    provider = incus.lab
    instance = "box"
    %s
  }
}
`, sock, step))

				g.holding(tc.hold(rb), tc.cut)
				killAtGate(t, g, rb, "run", "--all", "--auto-approve")
				tc.killed(t, rb, c)
				g.holding(nil, false)
				close(g.release)

				if resume {
					migrateOK(t, rb, "run", "--all", "--auto-approve")
				}
				migrateOK(t, rb, "rollback", "--auto-approve")

				if tc.direction == "pull" {
					if got, err := os.ReadFile(filepath.Join(rb, "app.conf")); err != nil || string(got) != userLocal {
						t.Errorf("after rollback the user's app.conf is %q (%v), want %q", got, err, userLocal)
					}
					left, _ := filepath.Glob(filepath.Join(rb, "*.migrate-*"))
					left2, _ := filepath.Glob(filepath.Join(rb, ".*.migrate-*"))
					if left = append(left, left2...); len(left) > 0 {
						t.Errorf("rollback left %v", left)
					}
					return
				}
				if got := guestFile(t, c, "/etc/app.conf"); got != userGuest {
					t.Errorf("after rollback the guest's /etc/app.conf is %q, want %q", got, userGuest)
				}
				if fi, err := c.StatFile(context.Background(), "box", "/etc/app.conf"); err != nil || fi.Mode != 0o640 {
					t.Errorf("after rollback /etc/app.conf is %+v (%v), want mode 0640", fi, err)
				}
				if _, err := c.StatFile(context.Background(), "box", "/etc/app.conf.migrate-orig"); !incusapi.IsNotFound(err) {
					t.Errorf("rollback left /etc/app.conf.migrate-orig (%v)", err)
				}
			})
		}
	}
}

// gatedLab serves a lab Incus host, with a stopped container "box",
// through a gate on a unix socket of its own.
func gatedLab(t *testing.T, root string) (*gate, *incusapi.Client, string) {
	t.Helper()
	lab, err := incushost.New(incushost.Options{Dir: filepath.Join(root, "lab"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.Close() })
	img := filepath.Join(root, "image")
	if err := incushost.Busybox(img); err != nil {
		t.Fatal(err)
	}
	if err := lab.ImportImage("busybox", img); err != nil {
		t.Fatal(err)
	}
	g := &gate{next: lab.Handler(), held: make(chan struct{}), release: make(chan struct{})}
	sock := filepath.Join(root, "incus.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(l) //nolint:errcheck // ends with Close
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		srv.Close()
	})
	c, err := incusapi.New(incusapi.Options{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.CreateInstance(context.Background(), incusapi.InstancesPost{Name: "box", Type: "container",
		Source: incusapi.InstanceSource{Type: "image", Alias: "busybox"}}); err != nil {
		t.Fatal(err)
	}
	return g, c, sock
}

// killAtGate runs migrate until the gate holds its request, then kills
// it with SIGKILL.
func killAtGate(t *testing.T, g *gate, rb string, args ...string) {
	t.Helper()
	cmd := exec.Command(migrateBin, append(args, "--runbook", rb, "--no-color")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-g.held:
	case err := <-exited:
		t.Fatalf("migrate %v ended (%v) before the request the test holds:\n%s", args, err, out.String())
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("migrate %v never sent the request the test holds:\n%s", args, out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	t.Logf("killed migrate %v at the held request; its output:\n%s", args, out.String())
}

func migrateOK(t *testing.T, rb string, args ...string) {
	t.Helper()
	cmd := exec.Command(migrateBin, append(args, "--runbook", rb, "--no-color")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("migrate %v: %v\n%s", args, err, out)
	}
	t.Logf("migrate %v:\n%s", args, out)
}

func writeLocal(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func guestFile(t *testing.T, c *incusapi.Client, p string) string {
	t.Helper()
	_, r, _, err := c.GetFile(context.Background(), "box", p)
	if err != nil {
		t.Fatalf("%s in the guest: %v", p, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
