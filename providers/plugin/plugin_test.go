package plugin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/fake"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// The test binary is its own plugin program: with MIGRATE_PLUGIN_TEST set
// it serves a fake provider whose Apply also knows a few tricks.
func TestMain(m *testing.M) {
	switch os.Getenv("MIGRATE_PLUGIN_TEST") {
	case "serve":
		os.Exit(plugin.Serve("fake", tricks()))
	case "echo":
		os.Exit(plugin.Serve("fake", echo{}))
	case "host":
		os.Exit(host())
	case "command":
		os.Exit(plugin.ServeCommand("fake", fake.Schema(), upper))
	}
	os.Setenv("MIGRATE_PLUGIN_TEST", "serve") // for the programs the tests start
	os.Exit(m.Run())
}

// tricks is the fake provider with an Apply that writes output, and on
// value "block" waits for cancellation, on "crash" dies, on "pid" answers
// its pid.
func tricks() *fake.Provider {
	p := fake.New()
	plain := fake.New()
	p.ApplyFn = func(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
		s := ""
		if cfg, _ := req.Config.Unmark(); cfg.Type().IsObjectType() && cfg.IsKnown() && !cfg.IsNull() && cfg.Type().HasAttribute("value") {
			if v, _ := cfg.GetAttr("value").Unmark(); v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
				s = v.AsString()
			}
		}
		if req.Log != nil {
			fmt.Fprintf(req.Log, "applying %s\n", req.Addr)
		}
		if strings.HasPrefix(s, "leak-") {
			// A library printing what it was given, in clear and
			// encoded, a last line without its newline, then a panic
			// (or an exit) that quotes it.
			fmt.Fprintf(os.Stderr, "debug: token=%s basic=%s\n", s, base64.StdEncoding.EncodeToString([]byte("me:"+s)))
			fmt.Fprintf(os.Stderr, "last words: %s", s)
			if strings.HasPrefix(s, "leak-exit-") {
				os.Exit(3)
			}
			panic("cannot use " + s)
		}
		switch s {
		case "mint":
			// A secret the program makes, marked sensitive, then prints.
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(minted).Mark(phases.SensitiveMark)})}
		case "say-minted":
			fmt.Fprintf(os.Stderr, "said: %s\n", minted)
			return plain.Apply(ctx, req)
		case "block":
			fmt.Fprintln(req.Log, "waiting")
			<-ctx.Done()
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "%s: %v.", req.Addr, ctx.Err())}
		case "effect-then-wait":
			// The effect is made; only a wait is left, which Stop ends.
			fmt.Fprintln(req.Log, "made it, waiting")
			select {
			case <-req.Stop:
				return providers.ApplyResponse{Stopped: true, Revert: &providers.RevertData{Description: "undo it"},
					Diagnostics: phases.Errorf("Stopped While Waiting", "%s: made, not waited for.", req.Addr)}
			case <-ctx.Done():
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "%s: %v.", req.Addr, ctx.Err())}
			}
		case "intend-then-block":
			// A change announced (Intent) before it is made, then a
			// wait: a kill here leaves a record that says the change.
			err := req.Intent(providers.RevertData{Description: "undo half", Data: []byte(`{"half":true}`)})
			if err != nil {
				return providers.ApplyResponse{Diagnostics: phases.Errorf("Not Saved", "%v", err)}
			}
			fmt.Fprintln(req.Log, "intended, waiting")
			<-ctx.Done()
			return providers.ApplyResponse{Diagnostics: phases.Errorf("Step Interrupted", "%s: %v.", req.Addr, ctx.Err())}
		case "intend":
			// The Intent's answer, in the output; none: "no intent".
			got := "no intent"
			if req.Intent != nil {
				got = "saved"
				if err := req.Intent(providers.RevertData{Description: "undo it"}); err != nil {
					got = err.Error()
				}
			}
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(got)})}
		case "crash":
			fmt.Fprintln(os.Stderr, "dying on purpose")
			os.Exit(3)
		case "noisy":
			// A library printing to stdout, without a newline: on the
			// protocol's stream it would swallow the next message.
			fmt.Print(strings.Repeat("noise ", 2000))
		case "env":
			// What the program inherited of migrate's secrets.
			got := os.Getenv("MIGRATE_VAR_tok") + "," + os.Getenv(providers.AgeIdentityEnv)
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(got)})}
		case "pid":
			return providers.ApplyResponse{Outputs: cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(strconv.Itoa(os.Getpid()))})}
		}
		return plain.Apply(ctx, req)
	}
	// The fields added to the protocol after the first: a plan's
	// irreversibility, a revert's Resumed.
	p.PlanFn = func(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
		r := plain.Plan(ctx, req)
		r.Irreversible = "cannot be undone: " + req.Addr.Name
		r.CopyBytes = 1 << 40
		return r
	}
	p.RevertFn = func(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
		fmt.Fprintf(req.Log, "resumed=%v\n", req.Resumed)
		return plain.Revert(ctx, req)
	}
	return p
}

// minted is the secret the "mint" trick makes.
const minted = "minted-CANARY-out-91c3"

func program(t testing.TB) plugin.Program {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return plugin.Program{Name: "fake", Command: exe, Schema: fake.Schema()}
}

func configured(t *testing.T, prog plugin.Program) providers.Interface {
	t.Helper()
	p := plugin.Factory(prog)()
	t.Cleanup(func() { p.(providers.Closer).Close() })
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake", Config: cty.ObjectVal(map[string]cty.Value{"endpoint": cty.StringVal("x")}), Dir: t.TempDir()})
	if r.Diagnostics.HasErrors() {
		t.Fatalf("Configure: %v", r.Diagnostics.Err())
	}
	return p
}

func stepConfig(value cty.Value) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"value": value, "fail": cty.NullVal(cty.Bool)})
}

func apply(ctx context.Context, p providers.Interface, value string, log io.Writer) providers.ApplyResponse {
	return p.Apply(ctx, providers.ApplyRequest{Type: fake.StepType, Addr: phases.Address{Type: fake.StepType, Name: "a"},
		Config: stepConfig(cty.StringVal(value)), Log: log})
}

// TestConformance: through the pipe, the fake still passes the suite
// every provider passes (unknown values, sensitive values, cancellation,
// revert, bad input).
func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New:            plugin.Factory(program(t)),
		ProviderConfig: cty.ObjectVal(map[string]cty.Value{"endpoint": cty.StringVal("fake://")}),
		Dir:            t.TempDir(),
		Cases: []providertest.Case{
			{Type: fake.StepType, Reversible: true, Config: stepConfig(cty.StringVal("hello world"))},
		},
	})
}

func TestSchemaStartsNothing(t *testing.T) {
	prog := program(t)
	prog.Command = "/nonexistent/migrate-provider-fake"
	p := plugin.Factory(prog)()
	if _, ok := p.Schema().StepTypes[fake.StepType]; !ok {
		t.Fatal("Schema did not answer from the compiled-in schema")
	}
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake"})
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "/nonexistent/migrate-provider-fake") {
		t.Fatalf("Configure with a missing program: %v", r.Diagnostics)
	}
}

func TestOtherBuildRefused(t *testing.T) {
	prog := program(t)
	prog.Schema = fake.Schema()
	st := prog.Schema.StepTypes[fake.StepType]
	st.Description = "changed since the program was built"
	prog.Schema.StepTypes = map[string]phases.StepType{fake.StepType: st}
	p := plugin.Factory(prog)()
	defer p.(providers.Closer).Close()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake"})
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "another build of migrate") {
		t.Fatalf("a program with another schema: %v", r.Diagnostics)
	}
}

// TestOutputAndCancel: a call's output arrives as it is written, and a
// cancelled call is interrupted in the program and still answered.
func TestOutputAndCancel(t *testing.T) {
	p := configured(t, program(t))
	ctx, cancel := context.WithCancel(context.Background())
	var log bytes.Buffer
	done := make(chan providers.ApplyResponse, 1)
	go func() { done <- apply(ctx, p, "block", &log) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case r := <-done:
		if !r.Diagnostics.HasErrors() || r.Diagnostics[0].Summary != "Step Interrupted" {
			t.Fatalf("a cancelled apply answered %v", r.Diagnostics)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled apply did not return")
	}
	if got := log.String(); got != "applying fake_step.a\nwaiting\n" {
		t.Fatalf("output of the call = %q", got)
	}
	// The program is still there for the next call.
	if r := apply(context.Background(), p, "after", nil); r.Diagnostics.HasErrors() || r.Outputs.GetAttr("value").AsString() != "after" {
		t.Fatalf("apply after a cancelled one: %v %#v", r.Diagnostics, r.Outputs)
	}
}

// TestStopCrosses: an Apply's Stop closed on the host side closes the
// program's copy (the stop line), and not its context: the provider
// answers Stopped with what to undo. A call without Stop gets none.
func TestStopCrosses(t *testing.T) {
	p := configured(t, program(t))
	stop := make(chan struct{})
	var log bytes.Buffer
	done := make(chan providers.ApplyResponse, 1)
	go func() {
		done <- p.Apply(context.Background(), providers.ApplyRequest{Type: fake.StepType, Addr: phases.Address{Type: fake.StepType, Name: "a"},
			Config: stepConfig(cty.StringVal("effect-then-wait")), Log: &log, Stop: stop})
	}()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	select {
	case r := <-done:
		if !r.Stopped || r.Revert == nil || r.Revert.Description != "undo it" || !r.Diagnostics.HasErrors() || r.Diagnostics[0].Summary != "Stopped While Waiting" {
			t.Fatalf("a stopped apply answered Stopped=%v Revert=%+v %v", r.Stopped, r.Revert, r.Diagnostics)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing Stop did not end the wait in the program")
	}
	if got := log.String(); got != "applying fake_step.a\nmade it, waiting\n" {
		t.Errorf("output of the call = %q", got)
	}
	// Without Stop, the program's wait ends only with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if r := apply(ctx, p, "effect-then-wait", io.Discard); r.Stopped || !r.Diagnostics.HasErrors() || r.Diagnostics[0].Summary != "Step Interrupted" {
		t.Errorf("an apply without Stop answered Stopped=%v %v", r.Stopped, r.Diagnostics)
	}
}

// TestIntentCrosses: an Apply's Intent called in the program calls the
// host's on the caller's goroutine, before the Apply returns, with the
// revert data; the host's error reaches the program; a call without
// Intent gets none.
func TestIntentCrosses(t *testing.T) {
	p := configured(t, program(t))
	addr := phases.Address{Type: fake.StepType, Name: "a"}
	saved := make(chan providers.RevertData, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan providers.ApplyResponse, 1)
	var log bytes.Buffer
	go func() {
		done <- p.Apply(ctx, providers.ApplyRequest{Type: fake.StepType, Addr: addr, Config: stepConfig(cty.StringVal("intend-then-block")), Log: &log,
			Intent: func(inv providers.RevertData) error { saved <- inv; return nil }})
	}()
	select {
	case inv := <-saved:
		if inv.Description != "undo half" || string(inv.Data) != `{"half":true}` {
			t.Errorf("the host saved %+v", inv)
		}
	case r := <-done:
		t.Fatalf("the apply returned before its Intent reached the host: %v", r.Diagnostics)
	case <-time.After(10 * time.Second):
		t.Fatal("the program's Intent did not reach the host")
	}
	cancel() // the kill, after the change was announced
	select {
	case r := <-done:
		if !r.Diagnostics.HasErrors() || r.Diagnostics[0].Summary != "Step Interrupted" {
			t.Errorf("the program's Intent failed, or the apply was not interrupted: %v", r.Diagnostics)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled apply did not return")
	}

	value := func(r providers.ApplyResponse) string {
		if r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		return r.Outputs.GetAttr("value").AsString()
	}
	refused := providers.ApplyRequest{Type: fake.StepType, Addr: addr, Config: stepConfig(cty.StringVal("intend")),
		Intent: func(providers.RevertData) error { return fmt.Errorf("the state is locked by someone else") }}
	if got := value(p.Apply(context.Background(), refused)); got != "the state is locked by someone else" {
		t.Errorf("the host's refusal reached the program as %q", got)
	}
	if got := value(apply(context.Background(), p, "intend", io.Discard)); got != "no intent" {
		t.Errorf("an apply without Intent: the program had one (%q)", got)
	}
}

// TestStdoutNoiseStaysOutOfTheProtocol: what a provider's libraries print
// to standard output does not break the messages.
func TestStdoutNoiseStaysOutOfTheProtocol(t *testing.T) {
	p := configured(t, program(t))
	done := make(chan providers.ApplyResponse, 1)
	go func() { done <- apply(context.Background(), p, "noisy", nil) }()
	select {
	case r := <-done:
		if r.Diagnostics.HasErrors() {
			t.Fatalf("apply with noise on stdout: %v", r.Diagnostics)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer of a call that printed to stdout never came")
	}
}

// TestSensitiveOutputsStayMarked: the sensitive mark crosses both ways,
// so the engine redacts exactly as with a built-in provider.
func TestSensitiveOutputsStayMarked(t *testing.T) {
	p := configured(t, program(t))
	secret := cty.StringVal("hunter2-canary").Mark(phases.SensitiveMark)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: fake.StepType, Addr: phases.Address{Type: fake.StepType, Name: "s"}, Config: stepConfig(secret)})
	if r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	if v := r.Outputs.GetAttr("value"); !v.HasMark(phases.SensitiveMark) {
		t.Fatalf("the output came back unmarked: %#v", r.Outputs)
	}
	// Unknown values cross too (plans are made before steps run).
	pr := p.Plan(context.Background(), providers.PlanRequest{Type: fake.StepType, Addr: phases.Address{Type: fake.StepType, Name: "u"}, Config: stepConfig(cty.UnknownVal(cty.String))})
	if pr.Diagnostics.HasErrors() {
		t.Fatalf("plan with an unknown value: %v", pr.Diagnostics.Err())
	}
}

// TestProgramDies: a program that dies fails its call with what it said
// last, and every later call says it is gone.
func TestProgramDies(t *testing.T) {
	p := configured(t, program(t))
	r := apply(context.Background(), p, "crash", nil)
	if !r.Diagnostics.HasErrors() {
		t.Fatal("the call of a program that died succeeded")
	}
	msg := r.Diagnostics.Err().Error()
	for _, want := range []string{"exited", "exit status 3", "dying on purpose"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
	if r := apply(context.Background(), p, "again", nil); !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "exited") {
		t.Fatalf("a call after the program died: %v", r.Diagnostics)
	}
}

// TestProgramDiesWithHost kills (SIGKILL) a host process that runs a
// plugin program: the program must not outlive it.
func TestProgramDiesWithHost(t *testing.T) {
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "MIGRATE_PLUGIN_TEST=host")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("the host did not say its program's pid: %q", buf[:n])
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the program %d is not running: %v", pid, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		// A zombie counts as gone: its parent, the killed host, is gone.
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the plugin program %d outlived its killed host", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// host is the process TestProgramDiesWithHost kills: it starts a program,
// prints its pid and waits.
func host() int {
	os.Setenv("MIGRATE_PLUGIN_TEST", "serve")
	exe, _ := os.Executable()
	p := plugin.Factory(plugin.Program{Name: "fake", Command: exe, Schema: fake.Schema()})()
	if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake"}); r.Diagnostics.HasErrors() {
		fmt.Println(r.Diagnostics.Err())
		return 1
	}
	r := apply(context.Background(), p, "pid", nil)
	if r.Diagnostics.HasErrors() {
		fmt.Println(r.Diagnostics.Err())
		return 1
	}
	fmt.Println(r.Outputs.GetAttr("value").AsString())
	time.Sleep(time.Minute)
	return 0
}

// TestSilentProgramRefused: a program that never introduces itself is
// killed after the handshake timeout, with a message that says so.
func TestSilentProgramRefused(t *testing.T) {
	defer plugin.SetHandshakeTimeout(200 * time.Millisecond)()
	dir := t.TempDir()
	silent := dir + "/migrate-provider-silent"
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := plugin.Factory(plugin.Program{Name: "fake", Command: silent, Schema: fake.Schema()})()
	start := time.Now()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake"})
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "said nothing") {
		t.Fatalf("a silent program: %v", r.Diagnostics)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refusing a silent program took %s", d)
	}
}

// TestNewFieldsCross: the plan's Irreversible and CopyBytes and the revert's Resumed
// are carried by the protocol, with a real provider behind it (every
// field is in TestEveryFieldCrosses).
func TestNewFieldsCross(t *testing.T) {
	p := configured(t, program(t))
	a := phases.Address{Type: fake.StepType, Name: "x"}
	pr := p.Plan(context.Background(), providers.PlanRequest{Type: fake.StepType, Addr: a, Config: stepConfig(cty.StringVal("v"))})
	if pr.Irreversible != "cannot be undone: x" {
		t.Errorf("Irreversible came back as %q", pr.Irreversible)
	}
	if pr.CopyBytes != 1<<40 {
		t.Errorf("CopyBytes came back as %d", pr.CopyBytes)
	}
	for _, resumed := range []bool{false, true} {
		var log bytes.Buffer
		r := p.(providers.Reverter).Revert(context.Background(), providers.RevertRequest{Type: fake.StepType, Addr: a, Config: stepConfig(cty.StringVal("v")),
			Revert: providers.RevertData{Description: "undo"}, Outputs: cty.EmptyObjectVal, Resumed: resumed, Log: &log})
		if r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		if want := fmt.Sprintf("resumed=%v", resumed); !strings.Contains(log.String(), want) {
			t.Errorf("Resumed %v: the revert logged %q", resumed, log.String())
		}
	}
}

// TestProgramEnvironment: a program inherits none of migrate's secrets
// (MIGRATE_VAR_*), except those its Program names.
func TestProgramEnvironment(t *testing.T) {
	t.Setenv("MIGRATE_VAR_tok", "s3cret")
	t.Setenv(providers.AgeIdentityEnv, "AGE-SECRET-KEY-1X")
	for _, c := range []struct {
		env  []string
		want string
	}{{nil, ","}, {[]string{providers.AgeIdentityEnv}, ",AGE-SECRET-KEY-1X"}} {
		prog := program(t)
		prog.Env = c.env
		r := apply(context.Background(), configured(t, prog), "env", nil)
		if r.Diagnostics.HasErrors() {
			t.Fatal(r.Diagnostics.Err())
		}
		if got := r.Outputs.GetAttr("value").AsString(); got != c.want {
			t.Errorf("Env %v: the program saw %q, want %q", c.env, got, c.want)
		}
	}
}

// TestOlderProtocolRefused: a program of the protocol before the generic
// codec (1) is refused at the handshake, with what to do.
func TestOlderProtocolRefused(t *testing.T) {
	old := t.TempDir() + "/migrate-provider-old"
	script := fmt.Sprintf("#!/bin/sh\necho '{\"protocol\":1,\"provider\":\"fake\",\"schema\":\"%s\"}'\nexec sleep 60\n", plugin.SchemaDigest(fake.Schema()))
	if err := os.WriteFile(old, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := plugin.Factory(plugin.Program{Name: "fake", Command: old, Schema: fake.Schema()})()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "fake"})
	if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "speaks plugin protocol 1, this migrate speaks 5") {
		t.Fatalf("a program of protocol 1: %v", r.Diagnostics)
	}
}
