package examples

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLabServePlansHomelab: `migrate-lab serve` runs as a process, and a
// shell that evaluates `migrate-lab env` validates and plans the first
// phase of a copy of examples/homelab against it, as the README says.
func TestLabServePlansHomelab(t *testing.T) {
	t.Parallel()
	lab := filepath.Join(t.TempDir(), "lab")
	serve := exec.Command(migrateLab, "serve", "--dir", lab)
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		serve.Process.Signal(syscall.SIGTERM) // a no-op when the test stopped it
		select {
		case <-exited:
		case <-time.After(time.Minute):
			serve.Process.Kill()
		}
	})
	up := make(chan string, 1)
	go func() {
		var out strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "eval") {
				up <- out.String()
			}
		}
		exited <- serve.Wait()
	}()
	select {
	case out := <-up:
		if !strings.Contains(out, "The lab is up") || !strings.Contains(out, `eval "$(migrate-lab env --dir `+lab+`)"`) {
			t.Errorf("lab serve says:\n%s", out)
		}
	case err := <-exited:
		t.Fatalf("lab serve exited: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("lab serve did not say the lab is up:\n%s", stderr.String())
	}

	dir := copyExample(t, "homelab")
	// What a user types: the lab's environment, then migrate.
	try := func(args ...string) (string, error) {
		script := `eval "$("$MIGRATE_LAB" env --dir "$LAB")" && exec "$MIGRATE" "$@" --runbook "$DIR" --no-color --age-identity "$DIR/secrets/demo-identity.txt"`
		cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
		cmd.Env = append(os.Environ(), "MIGRATE="+migrate, "MIGRATE_LAB="+migrateLab, "LAB="+lab, "DIR="+dir, "MIGRATE_AGE_IDENTITY=", "INCUS_SOCKET=", "INCUS_DIR=", "INCUS_CONF=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	shell := func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatalf("migrate %s against the lab: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := shell("validate"); !strings.HasPrefix(out, "The runbook is valid") {
		t.Errorf("validate: %s", out)
	}
	plan := shell("plan", "--phase", "rehearsal")
	for _, want := range []string{"incus_volume.talos_iso", filepath.Join(lab, "images"), "group.rehearsal.incus_instance.vm",
		`instance "rehearsal" is already absent`, "talos_image.talos", "register schematic " + labSchematicID(t), "computed locally " + i915SchematicID, "(1048576 bytes)", "Plan: 16 to create",
		"install: first config through the Incus host's API (first_install = \"nocloud\"): nothing is sent over the LAN", "(known after group.rehearsal.talos_machine_config.config, incus_volume.talos_iso): config and devices", // the user-data
		"group.rehearsal.talos_service_health.installed will run", "group.rehearsal.incus_device.config_cleared will run"} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, plan)
		}
	}
	// The whole move plans against it: the old VMs are read from the lab.
	whole := shell("plan")
	for _, want := range []string{`stop instance "matrix" (running -> stopped)`, `stop instance "services" (running -> stopped)`,
		"homeserver.signing.key -> ./secrets/synapse-signing.key.age", "attach disk migrate-data",
		"GET https://127.0.0.1:", "/.well-known/matrix/server until it answers 200", `with a body containing "matrix.example.org:443"`,
		"ca: the certificate must chain to " + filepath.Join(lab, "matrix-ca.pem"),
		`stop instance "services"`, "systemctl stop jellyfin", "homeserver.yaml -> ./secrets/synapse-homeserver.yaml.age"} {
		if !strings.Contains(whole, want) {
			t.Errorf("the whole plan lacks %q:\n%s", want, whole)
		}
	}

	// Before any VM exists, the pods are judged against the nodes the
	// machine configs make: schedulable, as the patches allow it.
	for _, want := range []string{"node rehearsal as its machine config makes it: taints none",
		"node talos-home as its machine config makes it: taints none",
		"scheduling: judged against node talos-home as its machine config makes it"} {
		if !strings.Contains(whole, want) {
			t.Errorf("the whole plan lacks %q:\n%s", want, whole)
		}
	}
	// Without allowSchedulingOnControlPlanes, Talos taints its control
	// plane: the plan fails, naming the taint and the fix.
	for _, patch := range []string{"patches/rehearsal.yaml", "patches/node.yaml"} {
		path := filepath.Join(dir, patch)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "allowSchedulingOnControlPlanes: true") {
			t.Fatalf("%s does not allow scheduling on the control plane", patch)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), "allowSchedulingOnControlPlanes: true", "allowSchedulingOnControlPlanes: false", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	refused, err := try("plan")
	if err == nil {
		t.Errorf("the plan passed with tainted control planes:\n%s", refused)
	}
	for _, want := range []string{"Pods Would Not Schedule", "Job media/data-share-write", "node rehearsal: untolerated taint node-role.kubernetes.io/control-plane:NoSchedule",
		"allowSchedulingOnControlPlanes: true"} {
		if !strings.Contains(strings.Join(strings.Fields(refused), " "), want) { // the terminal wraps lines
			t.Errorf("the refused plan lacks %q:\n%s", want, refused)
		}
	}

	// SIGTERM stops it: exit 0, no process of the lab left, no lab.env.
	serve.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("lab serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("lab serve did not stop on SIGTERM")
	}
	exited <- nil // for the cleanup
	if procs := processesMentioning(lab); len(procs) > 0 {
		t.Errorf("processes of the lab left: %v", procs)
	}
	cmd := exec.Command(migrateLab, "env", "--dir", lab)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no lab runs in "+lab) {
		t.Errorf("lab env after the lab stopped: %v\n%s", err, out)
	}
}

// processesMentioning lists the processes whose command line holds s.
func processesMentioning(s string) []string {
	var out []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, f+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}
