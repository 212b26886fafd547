package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// addressBlock is the lab's 127.B.1.N: no other test's (the demo test
// takes 21, tests/examples' lab 22, lab/home's test 100-249, a lab serve 0).
const addressBlock = "23"

// lab is the migrate-lab process the test runs, and what it reads of it.
type lab struct {
	dir   string // its --dir
	log   string // its output
	env   []string
	incus *incusapi.Client
}

// startLab runs migrate-lab in a directory of the test's, and waits until
// it serves and its Kubernetes binaries are ready (built the first time:
// make services builds them before the tests in CI).
func startLab(t *testing.T, root string) *lab {
	t.Helper()
	l := &lab{dir: filepath.Join(root, "lab"), log: filepath.Join(root, "lab.log")}
	logf, err := os.Create(l.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "migrate-lab"), "serve", "--dir", l.dir, "--address-block", addressBlock)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(30 * time.Minute) // a cold build of the binaries on a slow machine
	for !strings.Contains(readFile(l.log), "the Kubernetes binaries are ready") {
		select {
		case <-exited:
			t.Fatalf("migrate-lab stopped:\n%s", tail(readFile(l.log), 30))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lab was not ready after 30 minutes:\n%s", tail(readFile(l.log), 30))
		}
	}
	if l.env, err = labenv.Read(l.dir); err != nil {
		t.Fatal(err)
	}
	opts, err := incusapi.RemoteOptions(labenv.ClientConfig(l.dir), "") // HTTPS, as migrate
	if err != nil {
		t.Fatal(err)
	}
	if l.incus, err = incusapi.New(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.incus.Close)
	return l
}

// events are the lab's events since the index from.
func (l *lab) events(t *testing.T, from int) []home.Event {
	t.Helper()
	ev, err := home.ReadEvents(l.dir)
	if err != nil {
		t.Fatalf("the lab's events log: %v", err)
	}
	if from > len(ev) {
		t.Fatalf("the lab's events log shrank: %d events, %d before", len(ev), from)
	}
	return ev[from:]
}

// quiet waits until the lab's events log has not grown for calm (at
// most for limit) and returns how many events it holds then.
func (l *lab) quiet(t *testing.T, calm, limit time.Duration) int {
	t.Helper()
	n, since, deadline := len(l.events(t, 0)), time.Now(), time.Now().Add(limit)
	for time.Since(since) < calm && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if m := len(l.events(t, 0)); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// describeEvents names events for a failure message.
func describeEvents(ev []home.Event) string {
	if len(ev) == 0 {
		return "none new"
	}
	var parts []string
	for _, e := range ev {
		s := e.Kind + " in " + e.Instance
		switch {
		case e.Job != "":
			s += " (job " + e.Namespace + "/" + e.Job + ")"
		case len(e.Command) > 0:
			s += " (" + strings.Join(e.Command, " ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// instance is the lab's Incus instance of that name: nil when absent.
func (l *lab) instance(t *testing.T, name string) *incusapi.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, _, err := l.incus.Instance(ctx, name)
	if incusapi.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("the lab's Incus host: instance %s: %v", name, err)
	}
	return in
}

// lanAddress is where the lab's router puts the example's Talos VMs on
// the LAN (the addresses lab.env gives the example): Incus cannot say.
var lanAddress = map[string]string{"talos": "MIGRATE_VAR_node_address", "rehearsal": "MIGRATE_VAR_rehearsal_address"}

// ipv4 is the instance's address ("" when it has none: absent or
// stopped): a Talos VM's on the LAN, else the one the Incus host reports.
func (l *lab) ipv4(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := l.incus.InstanceState(ctx, name)
	if incusapi.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("the lab's Incus host: state of %s: %v", name, err)
	}
	if key, ok := lanAddress[name]; ok {
		if st.Status != "Running" {
			return ""
		}
		for _, kv := range l.env {
			if v, found := strings.CutPrefix(kv, key+"="); found {
				return v
			}
		}
		t.Fatalf("lab.env has no %s", key)
	}
	for _, nic := range st.Network {
		for _, a := range nic.Addresses {
			if a.Family == "inet" && strings.HasPrefix(a.Address, "127."+addressBlock+".") {
				return a.Address
			}
		}
	}
	return ""
}

// etcdHealthy waits up to wait for the etcd of the Talos VM name to
// answer healthy; false when the VM has no address or etcd never does.
func (l *lab) etcdHealthy(t *testing.T, name string, wait time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if ip := l.ipv4(t, name); ip != "" && kubecp.EtcdHealthy(context.Background(), ip) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Second)
	}
}

// exec runs a command in an instance and returns its exit code.
func (l *lab) exec(t *testing.T, name string, argv ...string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := l.incus.StartExec(ctx, name, incusapi.ExecPost{Command: argv})
	if err != nil {
		return -1, err
	}
	return l.incus.WaitExec(ctx, e)
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
