package talos_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// startMaintenanceMAC is a lab node booted from the ISO whose eth0 has mac.
func startMaintenanceMAC(t *testing.T, mac string) *maintLab {
	t.Helper()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: maintDisks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node",
		NICs: []talosnode.NIC{{Name: "eth0", MAC: mac}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return newMaintLab(t, n, "https://127.0.0.1:6443")
}

func macConfig(mac string) cty.Value {
	return obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "mac": cty.StringVal(mac), "verify": verify([]string{"apid"}, nil)})
}

// TestFirstInstallWithTheVMsMAC: the plan says the node at the address
// has the VM's MAC (given in another form), and the apply checks it again
// and installs.
func TestFirstInstallWithTheVMsMAC(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:01")
	p := l.provider(t, l.config(false))
	cfg := macConfig("10-66-6A-00-00-01")
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	want := "node " + l.n.Addr() + " is 10:66:6a:00:00:01, the VM's NIC (link eth0)\n"
	if !strings.Contains(pr.Diff, want) || strings.Contains(pr.Diff, "identity was not checked") {
		t.Errorf("the plan lacks %q:\n%s", want, pr.Diff)
	}
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	select {
	case <-l.n.Installed():
	default:
		t.Fatal("the node was not installed")
	}
	if !strings.Contains(log.String(), strings.TrimSuffix(want, "\n")) {
		t.Errorf("the apply's log lacks the check:\n%s", log.String())
	}
}

// TestFirstInstallRefusesAnotherMachine: another MAC at the address fails
// the plan, and the apply (the address changed hands after a plan that
// found the VM) sends nothing: the node stays in maintenance mode without
// a config.
func TestFirstInstallRefusesAnotherMachine(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:99")
	p := l.provider(t, l.config(false))
	cfg := macConfig("10:66:6a:00:00:01")
	wants := []string{"at " + l.n.Addr() + " has 10:66:6a:00:00:99 (eth0), not 10:66:6a:00:00:01", "another machine of the LAN answers at this address",
		"Check the router's DHCP reservation of 10:66:6a:00:00:01 for 127.0.0.1", "a NIC with hwaddr 10:66:6a:00:00:01 on the LAN bridge"}
	pr := plan(p, talos.MachineConfig, cfg)
	err := pr.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "Another Machine At The Address") {
		t.Fatalf("Plan = %v, want another machine refused", err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the plan's error lacks %q: %v", w, err)
		}
	}
	planned := []byte(`{"nodes":{},"rendered":"x","first_install":["` + l.n.Addr() + `"]}`)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: planned, Log: &bytes.Buffer{}})
	err = r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "Nothing was sent.") {
		t.Fatalf("Apply = %v, want nothing sent", err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the apply's error lacks %q: %v", w, err)
		}
	}
	if a := l.n.Applies(); len(a) != 0 || !l.n.Maintenance() {
		t.Errorf("after the refusal: applies %+v, maintenance %v", a, l.n.Maintenance())
	}
}

// TestFirstInstallNoNodeAtTheAddress: nothing answers at the address:
// the error names it, the MAC and the router's reservation to check.
func TestFirstInstallNoNodeAtTheAddress(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:01")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	conf := l.config(false)
	conf["endpoints"] = strs(dead)
	p := l.provider(t, conf)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "mac": cty.StringVal("10:66:6a:00:00:01"),
		"verify": verify([]string{"apid"}, nil), "boot_timeout": cty.StringVal("3s")})
	for _, what := range []string{"plan", "apply"} {
		var d error
		if what == "plan" {
			d = plan(p, talos.MachineConfig, cfg).Diagnostics.Err()
		} else {
			planned := []byte(`{"nodes":{},"rendered":"x","first_install":["` + dead + `"]}`)
			d = p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: planned, Log: &bytes.Buffer{}}).Diagnostics.Err()
		}
		wants := []string{"Cannot Reach Talos", "at " + dead, "the VM whose NIC has MAC 10:66:6a:00:00:01", "the router's DHCP reservation for 10:66:6a:00:00:01", "a NIC with hwaddr 10:66:6a:00:00:01 on the LAN bridge"}
		if what == "apply" {
			wants = append(wants, "nothing answered for 3s") // after boot_timeout
		}
		for _, w := range wants {
			if d == nil || !strings.Contains(d.Error(), w) {
				t.Errorf("%s: the error lacks %q: %v", what, w, d)
			}
		}
	}
}

// TestFirstInstallWaitsForTheNodeToBoot: planned as a first install, the
// apply finds nothing at the address yet (the VM is booting from the
// ISO) and waits for it, then checks its MAC and installs.
func TestFirstInstallWaitsForTheNodeToBoot(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:01")
	late, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: maintDisks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node",
		NICs: []talosnode.NIC{{Name: "eth0", MAC: "10:66:6a:00:00:02"}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	at := ln.Addr().String()
	ln.Close()
	conf := l.config(false)
	conf["endpoints"] = strs(at)
	p := l.provider(t, conf)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "mac": cty.StringVal("10:66:6a:00:00:02"),
		"verify": verify([]string{"apid"}, nil), "boot_timeout": cty.StringVal("2m")})
	go func() {
		time.Sleep(3 * time.Second) // booting
		if err := late.Start(at); err != nil {
			t.Errorf("the late node: %v", err)
		}
	}()
	t.Cleanup(late.Stop)
	var log bytes.Buffer
	planned := []byte(`{"nodes":{},"rendered":"x","first_install":["` + at + `"]}`)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: planned, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	select {
	case <-late.Installed():
	case <-time.After(time.Minute):
		t.Fatal("the late node was not installed")
	}
	if !strings.Contains(log.String(), "waiting up to 2m0s for the node at") {
		t.Errorf("the log does not say it waited:\n%s", log.String())
	}
}

// TestBadMACRefusedAtValidate: a MAC that does not parse fails the step
// before the node is asked; without mac the plan notes once that the
// node's identity was not checked.
func TestBadMACRefusedAtValidate(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:01")
	p := l.provider(t, l.config(false))
	r := plan(p, talos.MachineConfig, macConfig("10:66:6a:00:00"))
	if len(r.Diagnostics) != 1 || r.Diagnostics[0].Summary != "Invalid Attribute Value" ||
		!strings.Contains(r.Diagnostics[0].Detail, `The "mac" attribute of talos_machine_config.node must be the MAC of the VM's NIC`) || !strings.Contains(r.Diagnostics[0].Detail, `not "10:66:6a:00:00"`) {
		t.Errorf("a bad mac: %v", r.Diagnostics)
	}
	r = plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	if err := r.Diagnostics.Err(); err != nil || strings.Count(r.Diff, "the node's identity was not checked (no mac set)") != 1 {
		t.Errorf("plan without mac: %v\n%s", err, r.Diff)
	}
}
