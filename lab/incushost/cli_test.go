package incushost_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
)

// incusCLI runs the real incus client (Debian's incus-client, which
// `make services` installs) with the configuration conf; it returns what
// it printed and its exit code.
func incusCLI(t *testing.T, conf, stdin string, args ...string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("incus")
	if err != nil {
		t.Fatalf("the incus client is not installed (make services installs it, as CI does): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "INCUS_CONF="+conf, "HOME="+filepath.Dir(conf))
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("incus %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), code
}

func wantOut(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the output lacks %q:\n%s", what, w, out)
		}
	}
}

// TestIncusCLI: the everyday commands of the real incus client work
// against the lab host over HTTPS, as against IncusOS: trust by token,
// list, info, config show, exec (with stdin, an exit code, and a
// terminal), file pull and push, snapshots, storage, networks, profiles,
// operations and monitor.
func TestIncusCLI(t *testing.T) {
	dir := t.TempDir()
	s, err := incushost.New(incushost.Options{Dir: filepath.Join(dir, "host"), Seed: true, Pools: []string{"local", "tank"},
		Network: "incusbr0", LAN: "enp5s0", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.FilesystemVolume("tank", "data"); err != nil {
		t.Fatal(err)
	}
	addr, err := s.ServeHTTPS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "a", "incus")
	if err := s.WriteClientConfig(conf, "lab", "https://"+addr.String()); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, code := incusCLI(t, conf, "", args...)
		if code != 0 {
			t.Fatalf("incus %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}

	out := run("list")
	wantOut(t, "list", out, "| services | RUNNING |", "| matrix   | RUNNING |", "| k3s      | RUNNING |")
	run("stop", "k3s")
	out = run("list", "status=running") // a server-side filter (api_filtering)
	if !strings.Contains(out, "| services |") || strings.Contains(out, "k3s") {
		t.Errorf("list status=running:\n%s", out)
	}
	wantOut(t, "list status=stopped", run("list", "status=stopped"), "| k3s  | STOPPED |")
	run("start", "k3s")
	wantOut(t, "info", run("info"), "instances_files_sftp", "auth: trusted")
	wantOut(t, "info services", run("info", "services"), "Name: services", "Status: RUNNING")
	wantOut(t, "config show", run("config", "show", "services"), "user.lab: old-vm", "volatile.uuid:")
	wantOut(t, "storage list", run("storage", "list"), "| local ", "| tank ")
	wantOut(t, "storage volume list", run("storage", "volume", "list", "tank"), "| custom | data ")
	wantOut(t, "network list", run("network", "list"), "| incusbr0 | bridge   | YES", "| enp5s0   | bridge   | NO")
	wantOut(t, "profile list", run("profile", "list"), "| default ")

	// exec: output, stderr, the exit code, stdin; and a terminal.
	if out, code := incusCLI(t, conf, "", "exec", "services", "--", "sh", "-c", "echo out; echo err >&2; exit 3"); code != 3 || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
		t.Errorf("exec: exit %d, output %q", code, out)
	}
	if out, _ := incusCLI(t, conf, "typed input\n", "exec", "services", "--", "cat"); !strings.Contains(out, "typed input") {
		t.Errorf("exec with stdin: %q", out)
	}
	if out, code := incusCLI(t, conf, "echo $((6*7))\nexit 5\n", "exec", "-t", "services", "--", "sh"); code != 5 || !strings.Contains(out, "42") {
		t.Errorf("exec -t: exit %d, output %q", code, out)
	}

	// file push and pull (SFTP).
	src := filepath.Join(dir, "push.txt")
	if err := os.WriteFile(src, []byte("pushed by incus\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	run("file", "push", src, "services/root/push.txt")
	pulled := filepath.Join(dir, "pulled.txt")
	run("file", "pull", "services/root/push.txt", pulled)
	if b, err := os.ReadFile(pulled); err != nil || string(b) != "pushed by incus\n" {
		t.Errorf("the file pushed and pulled back: %q, %v", b, err)
	}

	// snapshots
	run("snapshot", "create", "services", "before-move")
	wantOut(t, "snapshot list", run("snapshot", "list", "services"), "before-move")

	// monitor sees a stop and a start; operation list a pending token.
	mctx, stopMonitor := context.WithCancel(context.Background())
	defer stopMonitor()
	mon := &syncBuffer{}
	m := exec.CommandContext(mctx, "incus", "monitor", "--type", "lifecycle")
	m.Env = append(os.Environ(), "INCUS_CONF="+conf, "HOME="+filepath.Dir(conf))
	m.Stdout, m.Stderr = mon, mon
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	seen := func() bool {
		return strings.Contains(mon.String(), "action: instance-stopped") && strings.Contains(mon.String(), "action: instance-started")
	}
	for !seen() && time.Now().Before(deadline) {
		run("stop", "k3s")
		run("start", "k3s")
		time.Sleep(500 * time.Millisecond) // the monitor may not have subscribed yet: try again
	}
	stopMonitor()
	_ = m.Wait()
	wantOut(t, "monitor", mon.String(), "action: instance-stopped", "source: /1.0/instances/k3s", "action: instance-started")

	// Trust by token: a second client, untrusted, is refused; with the
	// token `incus config trust add` made, it is trusted.
	token := strings.TrimSpace(lastLine(run("config", "trust", "add", "laptop")))
	wantOut(t, "operation list", run("operation", "list"), "TOKEN")
	conf2 := filepath.Join(dir, "b", "incus")
	if err := os.MkdirAll(conf2, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, code := incusCLI(t, conf2, "", "remote", "add", "lab2", forged(t, token)); code == 0 || !strings.Contains(out, "not authorized") {
		t.Errorf("a token with another secret: exit %d\n%s", code, out)
	}
	if out, code := incusCLI(t, conf2, "", "remote", "add", "lab2", token); code != 0 {
		t.Fatalf("remote add with the token: exit %d\n%s", code, out)
	}
	if out, code := incusCLI(t, conf2, "", "list", "lab2:"); code != 0 || !strings.Contains(out, "services") {
		t.Errorf("list through the new remote: exit %d\n%s", code, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// forged is the token with another secret.
func forged(t *testing.T, token string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		t.Fatalf("the token is not base64: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["secret"] == nil {
		t.Fatalf("the token: %s %v", b, err)
	}
	m["secret"] = strings.Repeat("0", 64)
	b, _ = json.Marshal(m)
	return base64.StdEncoding.EncodeToString(b)
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
