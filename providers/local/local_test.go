package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

func obj(m map[string]cty.Value) cty.Value { return cty.ObjectVal(m) }

func strs(s ...string) cty.Value {
	vs := make([]cty.Value, len(s))
	for i, x := range s {
		vs[i] = cty.StringVal(x)
	}
	return cty.ListVal(vs)
}

// modes runs f with and without PID namespaces.
func modes(t *testing.T, f func(t *testing.T, newP func() *local.Provider)) {
	t.Run("pidns", func(t *testing.T) {
		t.Parallel()
		f(t, local.New)
	})
	t.Run("pgroup", func(t *testing.T) {
		t.Parallel()
		f(t, func() *local.Provider { return local.WithoutPIDNamespace(local.New()) })
	})
}

func configured(t *testing.T, p *local.Provider, dir string) *local.Provider {
	t.Helper()
	if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "local", Config: cty.EmptyObjectVal, Dir: dir}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func apply(ctx context.Context, p *local.Provider, typ, name string, cfg cty.Value, log io.Writer) providers.ApplyResponse {
	return p.Apply(ctx, providers.ApplyRequest{Type: typ, Addr: phases.Address{Type: typ, Name: name}, Config: cfg, Log: log})
}

func plan(p *local.Provider, typ string, cfg cty.Value) providers.PlanResponse {
	return p.Plan(context.Background(), providers.PlanRequest{Type: typ, Addr: phases.Address{Type: typ, Name: "x"}, Config: cfg, Action: providers.Create})
}

func mustApply(t *testing.T, p *local.Provider, typ string, cfg cty.Value, log io.Writer) providers.ApplyResponse {
	t.Helper()
	r := apply(context.Background(), p, typ, "x", cfg, log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog: %s", err, log)
	}
	return r
}

func wantErr(t *testing.T, d phases.Diagnostics, parts ...string) {
	t.Helper()
	err := d.Err()
	if err == nil {
		t.Fatalf("no error; want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestExecArgvWithoutShell(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		p := configured(t, newP(), t.TempDir())
		var log bytes.Buffer
		r := mustApply(t, p, "exec", obj(map[string]cty.Value{"command": strs("printf", "[%s]\n", "a; echo injected", "$HOME")}), &log)
		if got, want := log.String(), "[a; echo injected]\n[$HOME]\n"; got != want {
			t.Errorf("log = %q, want %q", got, want)
		}
		if got := r.Outputs.GetAttr("exit_code"); !got.RawEquals(cty.NumberIntVal(0)) {
			t.Errorf("exit_code = %#v", got)
		}
		if r.Revert != nil {
			t.Errorf("an exec step without revert has revert data %+v, want nil", r.Revert)
		}
	})
}

func TestExecEnvAndDir(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		root := t.TempDir()
		if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := configured(t, newP(), root)
		var log bytes.Buffer
		mustApply(t, p, "exec", obj(map[string]cty.Value{
			"command": strs("sh", "-c", `echo "$(pwd) $GREETING $HOME"; echo err >&2`),
			"env":     cty.MapVal(map[string]cty.Value{"GREETING": cty.StringVal("hello there")}),
			"dir":     cty.StringVal("sub"),
		}), &log)
		want := filepath.Join(root, "sub") + " hello there " + os.Getenv("HOME") + "\nerr\n"
		if log.String() != want {
			t.Errorf("log = %q, want %q", log.String(), want)
		}
	})
}

func TestExecCreates(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	p := configured(t, local.New(), root)
	cfg := obj(map[string]cty.Value{
		"command": strs("sh", "-c", "echo ran >> count; touch done"),
		"creates": cty.StringVal("done"),
	})
	read := func() providers.Observation {
		return p.Read(context.Background(), providers.ReadRequest{Type: "exec", Addr: phases.Address{Type: "exec", Name: "x"}, Config: cfg}).Observation
	}
	if o := read(); o != providers.Absent {
		t.Errorf("Read before apply = %v, want absent", o)
	}
	for range 3 {
		mustApply(t, p, "exec", cfg, io.Discard)
	}
	b, err := os.ReadFile(filepath.Join(root, "count"))
	if err != nil || string(b) != "ran\n" {
		t.Errorf("count = %q, %v; want the command run exactly once", b, err)
	}
	if o := read(); o != providers.Present {
		t.Errorf("Read after apply = %v, want present", o)
	}
	noCreates := obj(map[string]cty.Value{"command": strs("true")})
	if o := p.Read(context.Background(), providers.ReadRequest{Type: "exec", Config: noCreates}).Observation; o != providers.Unknown {
		t.Errorf("Read without creates = %v, want unknown", o)
	}
}

func TestExecNonZeroExit(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		p := configured(t, newP(), t.TempDir())
		script := "for i in $(seq 1 50); do echo line-$i; done; echo last words >&2; exit 3"
		r := apply(context.Background(), p, "exec", "fails", obj(map[string]cty.Value{"command": strs("sh", "-c", script)}), io.Discard)
		wantErr(t, r.Diagnostics, "exec.fails", "exited with code 3", "line-50", "last words")
		if strings.Contains(r.Diagnostics.Err().Error(), "line-10\n") {
			t.Errorf("the error shows more than the last lines: %v", r.Diagnostics.Err())
		}
		if got := r.Outputs.GetAttr("exit_code"); !got.RawEquals(cty.NumberIntVal(3)) {
			t.Errorf("exit_code = %#v, want 3", got)
		}
		r = apply(context.Background(), p, "exec", "missing", obj(map[string]cty.Value{"command": strs("/no/such/program")}), io.Discard)
		wantErr(t, r.Diagnostics, "could not be started", "/no/such/program")
	})
}

func TestExecRevert(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		root := t.TempDir()
		if err := os.Mkdir(filepath.Join(root, "work"), 0o755); err != nil {
			t.Fatal(err)
		}
		p := configured(t, newP(), root)
		cfg := obj(map[string]cty.Value{
			"command": strs("sh", "-c", "echo $WHAT > file"),
			"revert":  strs("sh", "-c", `[ "$(cat file)" = "$WHAT" ] && [ "$PASS" = s3cret-canary ] && rm file`),
			"env": cty.MapVal(map[string]cty.Value{
				"WHAT": cty.StringVal("thing"),
				"PASS": cty.StringVal("s3cret-canary").Mark(phases.SensitiveMark),
			}),
			"dir": cty.StringVal("work"),
		})
		r := mustApply(t, p, "exec", cfg, io.Discard)
		if r.Revert == nil {
			t.Fatal("no revert data")
		}
		if want := `run: sh -c '[ "$(cat file)" = "$WHAT" ] && [ "$PASS" = s3cret-canary ] && rm file'`; r.Revert.Description != want {
			t.Errorf("revert data description = %q, want %q", r.Revert.Description, want)
		}
		if bytes.Contains(r.Revert.Data, []byte("s3cret-canary\"")) {
			t.Errorf("the revert data keeps a sensitive env value: %s", r.Revert.Data)
		}
		var data map[string]any
		if err := json.Unmarshal(r.Revert.Data, &data); err != nil || data["argv"] == nil || data["dir"] != "work" {
			t.Errorf("revertOf = %s (%v), want argv, env and dir", r.Revert.Data, err)
		}
		file := filepath.Join(root, "work", "file")
		if _, err := os.Stat(file); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		rr := p.Revert(context.Background(), providers.RevertRequest{Type: "exec", Addr: phases.Address{Type: "exec", Name: "x"}, Config: cfg, Revert: *r.Revert, Log: &log})
		if err := rr.Diagnostics.Err(); err != nil {
			t.Fatalf("Revert: %v\n%s", err, log.String())
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("revert did not run: %v", err)
		}
		// Without the configuration the sensitive value is not available.
		rr = p.Revert(context.Background(), providers.RevertRequest{Type: "exec", Addr: phases.Address{Type: "exec", Name: "x"}, Revert: *r.Revert})
		wantErr(t, rr.Diagnostics, "sensitive", `env "PASS"`)
	})
}

// procAlive reports whether pid is a live (not zombie) process running
// comm.
func procAlive(pid int, comm string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || !strings.Contains(s[:i], "("+comm) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// readPid waits for a pid file written by a step's process.
func readPid(t *testing.T, path string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file %s after %v", path, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAlive waits until pid runs comm: a pid file is written just before
// the exec.
func waitAlive(t *testing.T, pid int, comm string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !procAlive(pid, comm) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not running %s", pid, comm)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int, comm string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for procAlive(pid, comm) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d (%s) still alive %v later", pid, comm, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// grandchild is a script that starts a sleep in the background, records
// its pid as seen from here (not from inside a PID namespace), and waits.
const grandchild = `sh -c 'read pid rest < /proc/self/stat; echo $pid > pidfile.tmp; mv pidfile.tmp pidfile; exec sleep 30' & wait`

func TestExecCancelKillsEverything(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		root := t.TempDir()
		p := configured(t, newP(), root)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan providers.ApplyResponse)
		go func() {
			done <- apply(ctx, p, "exec", "sleeper", obj(map[string]cty.Value{"command": strs("sh", "-c", grandchild)}), io.Discard)
		}()
		pid := readPid(t, filepath.Join(root, "pidfile"), 10*time.Second)
		waitAlive(t, pid, "sleep")
		start := time.Now()
		cancel()
		select {
		case r := <-done:
			wantErr(t, r.Diagnostics, "exec.sleeper", "stopped")
		case <-time.After(5 * time.Second):
			t.Fatal("Apply did not return after its context was cancelled")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Apply took %v to return after cancellation", d)
		}
		waitGone(t, pid, "sleep", 2*time.Second)
	})
}

// TestExecLeavesNothingBehind: a background process a command leaves is
// killed when the command exits, as the namespace does.
func TestExecLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	modes(t, func(t *testing.T, newP func() *local.Provider) {
		root := t.TempDir()
		p := configured(t, newP(), root)
		script := `sh -c 'read pid rest < /proc/self/stat; echo $pid > pidfile.tmp; mv pidfile.tmp pidfile; exec sleep 30' >/dev/null 2>&1 &
while [ ! -s pidfile ]; do sleep 0.01; done`
		start := time.Now()
		mustApply(t, p, "exec", obj(map[string]cty.Value{"command": strs("sh", "-c", script)}), io.Discard)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Apply took %v", d)
		}
		waitGone(t, readPid(t, filepath.Join(root, "pidfile"), time.Second), "sleep", 2*time.Second)
	})
}

const helperEnv = "LOCAL_TEST_FAILSTOP_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		failStopHelper(dir)
		return
	}
	os.Exit(m.Run())
}

// failStopHelper plays the engine: it runs an exec step that starts a
// grandchild, and waits to be killed.
func failStopHelper(dir string) {
	p := local.New()
	p.Configure(context.Background(), providers.ConfigureRequest{Dir: dir})
	if os.Getenv(helperEnv+"_PROBE") != "" {
		var log bytes.Buffer
		r := apply(context.Background(), p, "exec", "probe", obj(map[string]cty.Value{"command": strs("sh", "-c", "echo probe-ran; exit 4")}), &log)
		r2 := apply(context.Background(), p, "exec", "probe", obj(map[string]cty.Value{"command": strs("true")}), &log)
		fmt.Printf("pidns=%v log=%q err=%v err2=%v\n", local.UsesPIDNamespace(p), log.String(), r.Diagnostics.Err(), r2.Diagnostics.Err())
		os.Exit(0)
	}
	// Learn the mode with a first command, as the engine would have.
	apply(context.Background(), p, "exec", "first", obj(map[string]cty.Value{"command": strs("true")}), io.Discard)
	if !local.UsesPIDNamespace(p) {
		fmt.Fprintln(os.Stderr, "helper: no PID namespace")
	}
	r := apply(context.Background(), p, "exec", "helper", obj(map[string]cty.Value{"command": strs("sh", "-c", grandchild)}), os.Stderr)
	fmt.Fprintln(os.Stderr, "helper: apply returned", r.Diagnostics.Err())
	os.Exit(3)
}

// TestExecFailStop kills the process running a step with SIGKILL, as a
// person or the OOM killer would kill migrate, and checks that the
// grandchild the step started dies too.
func TestExecFailStop(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+root)
	var stderr providertest.SyncBuffer
	helper.Stderr = &stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, filepath.Join(root, "pidfile"), 10*time.Second)
	waitAlive(t, pid, "sleep")
	if strings.Contains(stderr.String(), "helper: no PID namespace") {
		helper.Process.Kill()
		helper.Wait()
		syscall.Kill(pid, syscall.SIGKILL)
		t.Skip("no privilege for PID namespaces: a grandchild outlives a SIGKILLed migrate (documented limitation of the fallback)")
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitGone(t, pid, "sleep", 2*time.Second)
	if s := stderr.String(); strings.Contains(s, "helper: apply returned") {
		t.Errorf("the helper was not killed while the step ran: %s", s)
	}
}

// TestExecWithoutPrivilege runs a command as an unprivileged user, who
// cannot make PID namespaces: the provider falls back to process groups
// once and keeps using them.
func TestExecWithoutPrivilege(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for try := 0; ; try++ {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperEnv+"_PROBE=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err = cmd.CombinedOutput()
		// A process forked by a parallel test while the file was open for
		// writing may still hold it (golang.org/issue/22315).
		if !errors.Is(err, syscall.ETXTBSY) || try == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if want := `pidns=false log="probe-ran\n" err=Command Failed: exec.probe: sh -c 'echo probe-ran; exit 4' exited with code 4.`; !strings.HasPrefix(string(out), want) || !strings.HasSuffix(string(out), "err2=<nil>\n") {
		t.Errorf("helper said:\n%s\nwant it to start with:\n%s", out, want)
	}
}

func TestExecSensitiveNeverPrinted(t *testing.T) {
	t.Parallel()
	const canary = "canary-7f3a9c"
	p := configured(t, local.New(), t.TempDir())
	// The secret is printed in two pieces, so the redaction must work
	// across writes.
	script := `echo "token=$TOKEN"; printf 'split=canary-'; sleep 0.05; printf '7f3a9c\n'; echo "$TOKEN" >&2; echo "arg=$1"; exit 1`
	cfg := obj(map[string]cty.Value{
		"command": cty.ListVal([]cty.Value{cty.StringVal("sh"), cty.StringVal("-c"), cty.StringVal(script), cty.StringVal("zero"), cty.StringVal(canary).Mark(phases.SensitiveMark)}),
		"env":     cty.MapVal(map[string]cty.Value{"TOKEN": cty.StringVal(canary).Mark(phases.SensitiveMark), "PLAIN": cty.StringVal("visible")}),
		"revert":  strs("echo", "undo"),
	})
	pr := plan(p, "exec", cfg)
	if pr.Diagnostics.HasErrors() {
		t.Fatal(pr.Diagnostics.Err())
	}
	if !strings.Contains(pr.Diff, "TOKEN="+phases.Redacted) || !strings.Contains(pr.Diff, "PLAIN=visible") {
		t.Errorf("plan diff does not show the env as expected:\n%s", pr.Diff)
	}
	var log providertest.SyncBuffer
	r := apply(context.Background(), p, "exec", "secret", cfg, &log)
	everything := pr.Diff + log.String() + fmt.Sprint(r.Diagnostics) + string(r.Private)
	if r.Revert != nil {
		everything += r.Revert.Description + string(r.Revert.Data)
	}
	if strings.Contains(everything, canary) {
		t.Errorf("the canary appears in clear:\n%s", everything)
	}
	if n := strings.Count(log.String(), phases.Redacted); n != 4 {
		t.Errorf("log has %d redactions, want 4:\n%s", n, log.String())
	}
	wantErr(t, r.Diagnostics, "exited with code 1", "arg="+phases.Redacted)
}

func TestExecPlan(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	tests := []struct {
		name string
		cfg  map[string]cty.Value
		want string
		err  []string
	}{
		{"argv", map[string]cty.Value{"command": strs("printf", "%s\n", "a; b", "it's")},
			`run: printf '%s` + "\n" + `' 'a; b' 'it'\''s'`, nil},
		{"all", map[string]cty.Value{
			"command": strs("./deploy.sh", "--fast"), "dir": cty.StringVal("scripts"),
			"env":     cty.MapVal(map[string]cty.Value{"B": cty.StringVal("2"), "A": cty.StringVal("1")}),
			"creates": cty.StringVal("out/done"), "revert": strs("./undeploy.sh"),
		}, "run: ./deploy.sh --fast\ndir: scripts\nenv: A=1 B=2\ncreates: out/done\nrevert: ./undeploy.sh", nil},
		{"unknown", map[string]cty.Value{
			"command": cty.ListVal([]cty.Value{cty.StringVal("echo"), cty.UnknownVal(cty.String)}),
			"creates": cty.UnknownVal(cty.String), "env": cty.UnknownVal(cty.Map(cty.String)),
		}, "run: echo (known after apply)\nenv: (known after apply)\ncreates: (known after apply)", nil},
		{"missing command", map[string]cty.Value{"dir": cty.StringVal("x")}, "", []string{`"command"`, "required"}},
		{"empty command", map[string]cty.Value{"command": cty.ListValEmpty(cty.String)}, "", []string{`"command"`, "at least the program"}},
		{"wrong type", map[string]cty.Value{"command": cty.StringVal("ls -l")}, "", []string{`"command"`, "list of strings"}},
		{"bad env name", map[string]cty.Value{"command": strs("true"), "env": cty.MapVal(map[string]cty.Value{"A=B": cty.StringVal("1")})}, "", []string{`"env"`, `"A=B"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := plan(p, "exec", obj(tt.cfg))
			if tt.err != nil {
				wantErr(t, r.Diagnostics, tt.err...)
				return
			}
			if r.Diagnostics.HasErrors() {
				t.Fatal(r.Diagnostics.Err())
			}
			if r.Diff != tt.want {
				t.Errorf("diff:\n%s\nwant:\n%s", r.Diff, tt.want)
			}
		})
	}
	// Unknown values cannot be applied.
	r := apply(context.Background(), p, "exec", "x", obj(tests[2].cfg), io.Discard)
	wantErr(t, r.Diagnostics, "not known")
}

func TestHTTPCheck(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/warming":
			if calls.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/created":
			w.WriteHeader(http.StatusCreated)
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	p := configured(t, local.New(), t.TempDir())
	check := func(path string, extra map[string]cty.Value) cty.Value {
		m := map[string]cty.Value{"url": cty.StringVal(srv.URL + path), "interval": cty.StringVal("20ms"), "timeout": cty.StringVal("2s")}
		for k, v := range extra {
			m[k] = v
		}
		return obj(m)
	}
	t.Run("ok", func(t *testing.T) {
		t.Parallel()
		r := mustApply(t, p, "http_check", check("/ok", nil), io.Discard)
		if got := r.Outputs.GetAttr("status"); !got.RawEquals(cty.NumberIntVal(200)) {
			t.Errorf("status output = %#v", got)
		}
	})
	t.Run("other status", func(t *testing.T) {
		t.Parallel()
		mustApply(t, p, "http_check", check("/created", map[string]cty.Value{"status": cty.NumberIntVal(201)}), io.Discard)
		mustApply(t, p, "http_check", check("/redirect", map[string]cty.Value{"status": cty.NumberIntVal(302)}), io.Discard)
	})
	t.Run("503 then 200", func(t *testing.T) {
		t.Parallel()
		var log bytes.Buffer
		mustApply(t, p, "http_check", check("/warming", nil), &log)
		if calls.Load() != 3 {
			t.Errorf("%d requests, want 3", calls.Load())
		}
		if !strings.Contains(log.String(), "status 503") {
			t.Errorf("log does not show the 503: %q", log.String())
		}
	})
	// The budgets leave room for a slow machine (2 busy cores): the check
	// waits its whole timeout, then fails soon after, naming the last
	// answer it had.
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := apply(context.Background(), p, "http_check", "down", check("/down", map[string]cty.Value{"timeout": cty.StringVal("1s")}), io.Discard)
		wantErr(t, r.Diagnostics, "http_check.down", "did not answer 200 within 1s", "the last answer was status 503")
		if d := time.Since(start); d < time.Second || d > 30*time.Second {
			t.Errorf("took %v for a 1s timeout", d)
		}
	})
	// A request still waiting when the timeout ends is not an answer: the
	// error names the last one the URL gave.
	t.Run("last answer, not the deadline", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			<-r.Context().Done() // hangs until the check gives up
		}))
		t.Cleanup(slow.Close)
		cfg := obj(map[string]cty.Value{"url": cty.StringVal(slow.URL), "timeout": cty.StringVal("2s"), "interval": cty.StringVal("10ms")})
		r := apply(context.Background(), p, "http_check", "hanging", cfg, io.Discard)
		wantErr(t, r.Diagnostics, "within 2s", "the last answer was status 503")
		if strings.Contains(r.Diagnostics.Err().Error(), "deadline") {
			t.Errorf("the error names the check's own deadline: %v", r.Diagnostics.Err())
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		l := httptest.NewServer(http.NotFoundHandler())
		u := l.URL
		l.Close()
		r := apply(context.Background(), p, "http_check", "refused", obj(map[string]cty.Value{"url": cty.StringVal(u), "timeout": cty.StringVal("2s"), "interval": cty.StringVal("50ms")}), io.Discard)
		wantErr(t, r.Diagnostics, "http_check.refused", "the last answer was error:", "refused")
	})
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := apply(ctx, p, "http_check", "down", check("/down", map[string]cty.Value{"timeout": cty.StringVal("30s")}), io.Discard)
		wantErr(t, r.Diagnostics, "stopped")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to notice the cancellation", d)
		}
	})
	t.Run("sensitive url", func(t *testing.T) {
		t.Parallel()
		secretURL := srv.URL + "/down?token=canary-http-1234"
		var log bytes.Buffer
		cfg := check("/down", map[string]cty.Value{"url": cty.StringVal(secretURL).Mark(phases.SensitiveMark), "timeout": cty.StringVal("100ms")})
		r := apply(context.Background(), p, "http_check", "secret", cfg, &log)
		all := log.String() + r.Diagnostics.Err().Error() + plan(p, "http_check", cfg).Diff
		if strings.Contains(all, "canary-http") {
			t.Errorf("the sensitive URL appears: %s", all)
		}
	})
	t.Run("validation", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			cfg  map[string]cty.Value
			want []string
		}{
			{map[string]cty.Value{"status": cty.NumberIntVal(700)}, []string{`"status"`, "100 and 599", "700"}},
			{map[string]cty.Value{"status": cty.NumberFloatVal(200.5)}, []string{`"status"`, "whole number"}},
			{map[string]cty.Value{"timeout": cty.StringVal("soon")}, []string{`"timeout"`, "duration", `"soon"`}},
			{map[string]cty.Value{"interval": cty.StringVal("-1s")}, []string{`"interval"`, "duration"}},
			{map[string]cty.Value{"url": cty.StringVal("ftp://x")}, []string{`"url"`, "http://"}},
		} {
			cfg := check("/ok", tt.cfg)
			wantErr(t, plan(p, "http_check", cfg).Diagnostics, tt.want...)
			wantErr(t, apply(context.Background(), p, "http_check", "x", cfg, io.Discard).Diagnostics, tt.want...)
		}
	})
	t.Run("plan", func(t *testing.T) {
		t.Parallel()
		r := plan(p, "http_check", obj(map[string]cty.Value{"url": cty.StringVal("https://example.test/"), "insecure": cty.True}))
		if want := "GET https://example.test/ until it answers 200 (timeout 60s, every 1s)\ninsecure: TLS certificates are not verified"; r.Diff != want {
			t.Errorf("diff %q, want %q", r.Diff, want)
		}
	})
}

func TestApproval(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	cfg := obj(map[string]cty.Value{"message": cty.StringVal("switch DNS at the registrar")})
	req := func(a providers.Approval) providers.ApplyResponse {
		return p.Apply(context.Background(), providers.ApplyRequest{Type: "approval", Addr: phases.Address{Type: "approval", Name: "dns"}, Config: cfg, Approval: a})
	}
	recorded := func(t *testing.T, r providers.ApplyResponse, by string) {
		t.Helper()
		if err := r.Diagnostics.Err(); err != nil {
			t.Fatal(err)
		}
		if r.Facts["approved_by"] != by || r.Outputs.GetAttr("approved_by").AsString() != by {
			t.Errorf("approved by %q / %#v, want %q", r.Facts["approved_by"], r.Outputs, by)
		}
		if at, err := time.Parse(time.RFC3339, r.Facts["approved_at"]); err != nil || time.Since(at) > time.Minute {
			t.Errorf("approved_at %q: %v", r.Facts["approved_at"], err)
		}
		if r.Revert == nil {
			t.Error("no revert data")
		}
	}
	t.Run("by flag", func(t *testing.T) {
		t.Parallel()
		recorded(t, req(providers.Approval{By: "ana@desk", Prompt: func(string) (bool, error) {
			t.Error("asked although --approve was given")
			return false, nil
		}}), "ana@desk")
	})
	t.Run("prompt yes", func(t *testing.T) {
		t.Parallel()
		var asked string
		r := req(providers.Approval{Prompt: func(q string) (bool, error) { asked = q; return true, nil }})
		if want := "Approve approval.dns? switch DNS at the registrar"; asked != want {
			t.Errorf("asked %q, want %q", asked, want)
		}
		if by := r.Facts["approved_by"]; !strings.Contains(by, "@") {
			t.Errorf("approved_by %q is not user@host", by)
		}
		recorded(t, r, r.Facts["approved_by"])
	})
	t.Run("prompt no", func(t *testing.T) {
		t.Parallel()
		wantErr(t, req(providers.Approval{Prompt: func(string) (bool, error) { return false, nil }}).Diagnostics, "approval.dns", "not approved")
	})
	t.Run("prompt error", func(t *testing.T) {
		t.Parallel()
		wantErr(t, req(providers.Approval{Prompt: func(string) (bool, error) { return false, io.ErrUnexpectedEOF }}).Diagnostics, "unexpected EOF")
	})
	t.Run("nobody", func(t *testing.T) {
		t.Parallel()
		r := req(providers.Approval{})
		wantErr(t, r.Diagnostics, "Step approval.dns needs a person: rerun with --approve approval.dns, or run it in a terminal")
	})
	t.Run("read", func(t *testing.T) {
		t.Parallel()
		rd := func(prior *providers.Prior) providers.Observation {
			return p.Read(context.Background(), providers.ReadRequest{Type: "approval", Config: cfg, Prior: prior}).Observation
		}
		if rd(nil) != providers.Absent || rd(&providers.Prior{}) != providers.Present {
			t.Errorf("Read: %v without prior, %v with", rd(nil), rd(&providers.Prior{}))
		}
	})
}

// TestApprovalRevertMessage: what was done by hand is undone by hand; the
// rollback plan (the revert data's description) and the revert's log say what.
func TestApprovalRevertMessage(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	addr := phases.Address{Type: "approval", Name: "dns"}
	cfg := obj(map[string]cty.Value{"message": cty.StringVal("point DNS at the node"), "revert_message": cty.StringVal("point DNS back at the old VM")})
	plan := p.Plan(context.Background(), providers.PlanRequest{Type: "approval", Addr: addr, Config: cfg})
	if err := plan.Diagnostics.Err(); err != nil || !strings.Contains(plan.Diff, "on rollback: point DNS back at the old VM") {
		t.Errorf("plan %q, %v: want the rollback's message", plan.Diff, err)
	}
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: "approval", Addr: addr, Config: cfg, Approval: providers.Approval{By: "ana@desk"}})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Revert == nil || r.Revert.Description != "ask a person: point DNS back at the old VM" {
		t.Fatalf("revert data %+v", r.Revert)
	}
	for range 2 { // a revert runs again when resumed: it only says it again
		var log bytes.Buffer
		rv := p.Revert(context.Background(), providers.RevertRequest{Type: "approval", Addr: addr, Config: cfg, Revert: *r.Revert, Log: &log})
		if err := rv.Diagnostics.Err(); err != nil || !strings.Contains(log.String(), "by hand, now: point DNS back at the old VM") {
			t.Errorf("revert logged %q, %v", log.String(), err)
		}
	}
	// The revert data goes to the state: a sensitive message stays out of it.
	sens := obj(map[string]cty.Value{"message": cty.StringVal("x"), "revert_message": cty.StringVal("s3cret").Mark(phases.SensitiveMark)})
	r = p.Apply(context.Background(), providers.ApplyRequest{Type: "approval", Addr: addr, Config: sens, Approval: providers.Approval{By: "ana@desk"}})
	if r.Revert == nil || strings.Contains(r.Revert.Description, "s3cret") || !strings.Contains(r.Revert.Description, "sensitive") {
		t.Errorf("revert data with a sensitive revert_message: %+v", r.Revert)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	dur := func(s string) cty.Value { return obj(map[string]cty.Value{"duration": cty.StringVal(s)}) }
	start := time.Now()
	mustApply(t, p, "wait", dur("50ms"), io.Discard)
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("waited %v, want 50ms", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	wantErr(t, apply(ctx, p, "wait", "long", dur("1h"), io.Discard).Diagnostics, "wait.long", "stopped")
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v to notice the cancellation", d)
	}
	wantErr(t, plan(p, "wait", dur("a while")).Diagnostics, `"duration"`, `"a while"`)
	wantErr(t, plan(p, "wait", obj(map[string]cty.Value{})).Diagnostics, `"duration"`, "required")
	if d := plan(p, "wait", dur("5m")).Diff; d != "wait 5m" {
		t.Errorf("diff %q", d)
	}
	// Zero waits are cheap: 10,000 of them well within a second.
	zero := dur("0s")
	start = time.Now()
	for range 10000 {
		if r := apply(context.Background(), p, "wait", "z", zero, nil); r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10,000 zero waits took %v", d)
	}
}

func TestUnknownStepType(t *testing.T) {
	t.Parallel()
	p := configured(t, local.New(), t.TempDir())
	wantErr(t, plan(p, "shell", cty.NilVal).Diagnostics, "Unsupported Step Type", `"shell"`)
}
