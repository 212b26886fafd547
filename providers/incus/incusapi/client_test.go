package incusapi

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServer(t *testing.T) {
	c := socketClient(t)
	s, err := c.Server(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s.Auth != "trusted" || s.Environment.ServerVersion == "" || !s.HasExtension("etag") {
		t.Fatalf("GET /1.0: auth %q, version %q, %d extensions", s.Auth, s.Environment.ServerVersion, len(s.APIExtensions))
	}
	t.Logf("Incus %s, %d API extensions", s.Environment.ServerVersion, len(s.APIExtensions))
}

func TestInstanceLifecycle(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 3*time.Minute)
	name := launch(t, c, "iapi-life", true, map[string]string{"user.migrate": "1"})

	inst, etag, err := c.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Name != name || inst.Type != "container" || inst.Status != "Running" || etag == "" ||
		inst.Config["user.migrate"] != "1" || inst.CreatedAt.IsZero() || !slices.Contains(inst.Profiles, "default") ||
		inst.ExpandedDevices["root"]["type"] != "disk" {
		t.Fatalf("Instance: %+v etag %q", inst, etag)
	}
	list, err := c.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(i Instance) bool { return i.Name == name && i.Status == "Running" }) {
		t.Fatalf("Instances does not list %s running: %+v", name, list)
	}
	st, err := c.InstanceState(ctx, name)
	if err != nil || st.Status != "Running" || st.StatusCode != 103 || st.Pid <= 0 {
		t.Fatalf("InstanceState: %+v, %v", st, err)
	}

	// Update with the ETag, then a stale ETag must be refused (412).
	put := inst.Put()
	put.Config["user.migrate"] = "2"
	put.Description = "updated"
	if err := c.UpdateInstance(ctx, name, put, etag); err != nil {
		t.Fatalf("UpdateInstance with the current ETag: %v", err)
	}
	inst2, etag2, err := c.Instance(ctx, name)
	if err != nil || inst2.Config["user.migrate"] != "2" || inst2.Description != "updated" || etag2 == etag {
		t.Fatalf("after update: %+v etag %q (was %q), %v", inst2, etag2, etag, err)
	}
	put.Config["user.migrate"] = "3"
	err = c.UpdateInstance(ctx, name, put, etag) // stale
	var se *StatusError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &se) || se.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("update with a stale ETag: want *StatusError 412 / ErrConflict, got %v", err)
	}
	t.Logf("stale ETag: %v", err)
	if inst3, _, _ := c.Instance(ctx, name); inst3.Config["user.migrate"] != "2" {
		t.Fatalf("stale update was applied: %v", inst3.Config)
	}

	// Graceful stop, then the operation failure "already stopped".
	start := time.Now()
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Timeout: 30}); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	t.Logf("graceful stop: %v", time.Since(start).Round(time.Millisecond))
	if s := status(t, c, name); s != "Stopped" {
		t.Fatalf("after stop: %s", s)
	}
	err = c.SetState(ctx, name, InstanceStatePut{Action: "stop", Timeout: 30})
	if err == nil || !strings.Contains(err.Error(), "already stopped") || !IsAlreadyInState(err) ||
		!errors.As(err, &se) || se.Operation == "" {
		t.Fatalf("stop of a stopped instance: want the operation's failure \"already stopped\", got %v", err)
	}
	t.Logf("operation failure: %v", err)

	if err := c.SetState(ctx, name, InstanceStatePut{Action: "start"}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if s := status(t, c, name); s != "Running" {
		t.Fatalf("after start: %s", s)
	}
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "start"}); !IsAlreadyInState(err) {
		t.Fatalf("start of a running instance: want already running, got %v", err)
	}
	if err := c.DeleteInstance(ctx, name); err == nil {
		t.Fatalf("delete of a running instance succeeded")
	} else {
		t.Logf("delete running: %v", err)
	}
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatalf("force stop: %v", err)
	}
	if s := status(t, c, name); s != "Stopped" {
		t.Fatalf("after force stop: %s", s)
	}
	if err := c.DeleteInstance(ctx, name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, _, err := c.Instance(ctx, name); !IsNotFound(err) {
		t.Fatalf("instance after delete: want not found, got %v", err)
	}
}

func TestUnknownInstance(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 30*time.Second)
	name := uniqueName("iapi-none")
	_, _, err := c.Instance(ctx, name)
	var se *StatusError
	if !IsNotFound(err) || !errors.As(err, &se) || se.StatusCode != 404 || !strings.Contains(err.Error(), name) {
		t.Fatalf("Instance: want 404, got %v", err)
	}
	t.Logf("unknown: %v", err)
	if _, err := c.InstanceState(ctx, name); !IsNotFound(err) {
		t.Fatalf("InstanceState: %v", err)
	}
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "start"}); !IsNotFound(err) {
		t.Fatalf("SetState: %v", err)
	}
	if err := c.DeleteInstance(ctx, name); !IsNotFound(err) {
		t.Fatalf("DeleteInstance: %v", err)
	}
	if _, err := c.Snapshots(ctx, name); !IsNotFound(err) {
		t.Fatalf("Snapshots: %v", err)
	}
	if err := c.UpdateInstance(ctx, name, InstancePut{}, ""); !IsNotFound(err) {
		t.Fatalf("UpdateInstance: %v", err)
	}
}

func TestSnapshots(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 3*time.Minute)
	name := launch(t, c, "iapi-snap", true, map[string]string{"user.generation": "1"})

	if err := c.CreateSnapshot(ctx, name, "before", false); err != nil {
		t.Fatalf("CreateSnapshot: %v", err)
	}
	if err := c.CreateSnapshot(ctx, name, "before", false); err == nil {
		t.Fatalf("a duplicate snapshot was created")
	} else {
		t.Logf("duplicate snapshot: %v", err)
	}
	snaps, err := c.Snapshots(ctx, name)
	if err != nil || len(snaps) != 1 || snaps[0].Name != "before" || snaps[0].CreatedAt.IsZero() ||
		snaps[0].Config["user.generation"] != "1" {
		t.Fatalf("Snapshots: %+v, %v", snaps, err)
	}

	inst, etag, err := c.Instance(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	put := inst.Put()
	put.Config["user.generation"] = "2"
	if err := c.UpdateInstance(ctx, name, put, etag); err != nil {
		t.Fatal(err)
	}

	// Restore on a running instance: the daemon stops, restores, restarts.
	start := time.Now()
	if err := c.RestoreSnapshot(ctx, name, "before"); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	t.Logf("restore of a running instance: %v", time.Since(start).Round(time.Millisecond))
	inst, _, err = c.Instance(ctx, name)
	if err != nil || inst.Config["user.generation"] != "1" || inst.Status != "Running" {
		t.Fatalf("after restore: status %s, user.generation %q, %v", inst.Status, inst.Config["user.generation"], err)
	}
	if err := c.RestoreSnapshot(ctx, name, "nosuch"); err == nil {
		t.Fatalf("restore of an unknown snapshot succeeded")
	} else {
		t.Logf("restore unknown: %v", err)
	}

	if err := c.DeleteSnapshot(ctx, name, "before"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if snaps, err := c.Snapshots(ctx, name); err != nil || len(snaps) != 0 {
		t.Fatalf("after delete: %+v, %v", snaps, err)
	}
	if err := c.DeleteSnapshot(ctx, name, "before"); !IsNotFound(err) {
		t.Fatalf("delete of a deleted snapshot: want not found, got %v", err)
	}
}

// A guest that ignores the halt signal (lxc.signal.halt=SIGUSR2, which the
// busybox init neither traps nor dies of, being PID 1): a graceful stop
// times out; cancelling ctx ends the wait at once.
func TestGracefulStopTimeoutAndCancel(t *testing.T) {
	c := socketClient(t)
	name := launch(t, c, "iapi-deaf", true, map[string]string{"raw.lxc": "lxc.signal.halt=SIGUSR2"})

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Timeout: 600})
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) || took > 3*time.Second {
		t.Fatalf("cancelled wait: want context.Canceled within ~1 s, got %v after %v", err, took)
	}
	t.Logf("cancelled after %v: %v", took.Round(time.Millisecond), err)
	if s := status(t, c, name); s != "Running" {
		t.Fatalf("deaf guest: %s", s)
	}

	// The daemon's shutdown goes on after the wait was abandoned: a forced
	// stop still works.
	ctx2 := ctxT(t, time.Minute)
	if err := c.SetState(ctx2, name, InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatalf("force stop during an abandoned graceful stop: %v", err)
	}
	if err := c.SetState(ctx2, name, InstanceStatePut{Action: "start"}); err != nil {
		t.Fatalf("start: %v", err)
	}

	// A graceful stop with a short timeout fails clearly; still running.
	start = time.Now()
	err = c.SetState(ctx2, name, InstanceStatePut{Action: "stop", Timeout: 2})
	if !IsShutdownTimeout(err) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("graceful stop of a deaf guest: want a shutdown timeout, got %v", err)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if s := status(t, c, name); s != "Running" {
		t.Fatalf("after a timed-out stop: %s", s)
	}
	if err := c.SetState(ctx2, name, InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatalf("force stop after a timed-out stop: %v", err)
	}
	if s := status(t, c, name); s != "Stopped" {
		t.Fatalf("after force stop: %s", s)
	}

	// ctx ending before anything is sent.
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := c.SetState(done, name, InstanceStatePut{Action: "start"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	c, err := New(Options{Socket: filepath.Join(t.TempDir(), "nope.socket")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Server(ctxT(t, 5*time.Second))
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "nope.socket") || !strings.Contains(err.Error(), "incusd running") {
		t.Fatalf("missing socket: %v", err)
	}
	t.Logf("socket: %v", err)

	c, err = New(Options{URL: "https://127.0.0.1:1", ServerCert: serverCertPEM(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Server(ctxT(t, 5*time.Second))
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "core.https_address") {
		t.Fatalf("closed port: %v", err)
	}
	t.Logf("https: %v", err)
}

func TestNewErrors(t *testing.T) {
	cert, _ := selfSigned(t, "x")
	for _, o := range []Options{
		{URL: "http://127.0.0.1:8443"},
		{URL: "https://127.0.0.1:8443", ClientCert: cert},
		{URL: "https://127.0.0.1:8443", ServerCert: []byte("junk")},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o.URL)
		} else {
			t.Logf("%v", err)
		}
	}
	c, err := New(Options{URL: "127.0.0.1"})
	if err != nil || c.Target() != "https://127.0.0.1:8443" {
		t.Fatalf("bare host: %v %v", c, err)
	}
}

func TestRemoteOptions(t *testing.T) {
	sock := socketClient(t)
	certPEM, keyPEM := trustedCert(t, sock)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("config.yml", []byte(`default-remote: lab
remotes:
  images:
    addr: https://images.linuxcontainers.org
    protocol: simplestreams
    public: true
  local:
    addr: unix://
    protocol: incus
    public: false
  lab:
    addr: https://`+testHTTPS+`
    auth_type: tls
    project: default
    protocol: incus
    public: false
  sock:
    addr: unix:///run/elsewhere/unix.socket
    protocol: incus
aliases: {}
`))
	write("servercerts/lab.crt", serverCertPEM(t))
	write("client.crt", certPEM)
	write("client.key", keyPEM)

	for _, remote := range []string{"lab", ""} { // "" = default-remote
		opts, err := RemoteOptions(dir, remote)
		if err != nil {
			t.Fatal(err)
		}
		if opts.URL != "https://"+testHTTPS || opts.Project != "default" || len(opts.ServerCert) == 0 ||
			len(opts.ClientCert) == 0 || len(opts.ClientKey) == 0 {
			t.Fatalf("RemoteOptions(%q): %+v", remote, opts)
		}
		c, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Server(ctxT(t, 10*time.Second))
		if err != nil || s.Auth != "trusted" {
			t.Fatalf("Server through remote %q: %+v %v", remote, s, err)
		}
		if _, err := c.Instances(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("Instances through remote %q: %v", remote, err)
		}
		c.Close()
	}
	if opts, err := RemoteOptions(dir, "local"); err != nil || opts.Socket != DefaultSocket || opts.URL != "" {
		t.Fatalf("local: %+v %v", opts, err)
	}
	if opts, err := RemoteOptions(dir, "sock"); err != nil || opts.Socket != "/run/elsewhere/unix.socket" {
		t.Fatalf("unix:///path: %+v %v", opts, err)
	}
	if _, err := RemoteOptions(dir, "images"); err == nil || !strings.Contains(err.Error(), "simplestreams") {
		t.Fatalf("simplestreams remote: %v", err)
	}
	if _, err := RemoteOptions(dir, "nosuch"); err == nil || !strings.Contains(err.Error(), "lab") {
		t.Fatalf("unknown remote: %v", err)
	} else {
		t.Logf("unknown remote: %v", err)
	}
	if opts, err := RemoteOptions(t.TempDir(), ""); err != nil || opts.Socket != DefaultSocket {
		t.Fatalf("no config.yml: %+v %v", opts, err)
	}
}
