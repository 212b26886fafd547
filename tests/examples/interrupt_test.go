package examples

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// stepStatuses reads `migrate status --json`: address -> status.
func stepStatuses(t *testing.T, dir string, env []string, vars []string) map[string]string {
	t.Helper()
	out := run(t, dir, env, append([]string{"status", "--json"}, vars...)...)
	var doc struct {
		Phases []struct {
			Steps []struct {
				Address string `json:"address"`
				Status  string `json:"status"`
			} `json:"steps"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, p := range doc.Phases {
		for _, s := range p.Steps {
			m[s.Address] = s.Status
		}
	}
	return m
}

// TestCtrlCWithAProviderProgram presses Ctrl-C — SIGINT to the whole
// foreground process group, as a terminal does — while a Talos step hangs
// in the provider program: the first one must not reach the program (the
// step keeps running, migrate waits for it), the second aborts the step
// through the program, and a new run finishes the phase.
func TestCtrlCWithAProviderProgram(t *testing.T) {
	t.Parallel()
	labDir := t.TempDir()
	node, err := talosnode.New(talosnode.Options{Dir: labDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	dir := copyExample(t, "talos-platform")
	identity := filepath.Join(t.TempDir(), "age.key")
	if out, err := exec.Command("go", "run", "filippo.io/age/cmd/age-keygen", "-o", identity).CombinedOutput(); err != nil {
		t.Fatalf("age-keygen: %v\n%s", err, out)
	}
	env := []string{"MIGRATE_AGE_IDENTITY=" + identity}
	vars := []string{"--var", "lab=" + labDir}
	node.Hang("Bootstrap")

	cmd := exec.Command(migrate, append([]string{"run", "--phase", "platform", "--auto-approve", "--runbook", dir, "--no-color"}, vars...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, like a terminal's foreground job
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	waitFor := func(what string, ok func(map[string]string) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok(stepStatuses(t, dir, env, vars)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened:\n%s", what, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("the bootstrap step starting", func(s map[string]string) bool { return s["talos_bootstrap.etcd"] == "running" })

	// First Ctrl-C: migrate finishes the running step, so the program
	// must not have been interrupted with it.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if s := stepStatuses(t, dir, env, vars); s["talos_bootstrap.etcd"] != "running" {
		t.Fatalf("after the first Ctrl-C the bootstrap is %q, want still running (did the provider program get the SIGINT?):\n%s", s["talos_bootstrap.etcd"], out.String())
	}
	if cmd.ProcessState != nil {
		t.Fatalf("migrate exited at the first Ctrl-C:\n%s", out.String())
	}

	// Second Ctrl-C: abort; the program cancels the call and answers.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("migrate did not stop at the second Ctrl-C:\n%s", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit code %d, want 130:\n%s", code, out.String())
	}
	if strings.Contains(out.String(), "exited") && strings.Contains(out.String(), "migrate-provider-talos") {
		t.Errorf("the provider program died instead of answering:\n%s", out.String())
	}

	// The node answers again: a new run finishes the phase.
	node.Reset()
	run(t, dir, env, append([]string{"run", "--phase", "platform", "--auto-approve"}, vars...)...)
	if s := stepStatuses(t, dir, env, vars); s["talos_bootstrap.etcd"] != "done" || s["talos_kubeconfig.admin"] != "done" {
		t.Errorf("after the resumed run: %v", s)
	}
}
