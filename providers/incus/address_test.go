package incus_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
	"github.com/homelab-migrate/migrate/runbooks"
)

// netStep is an incus_instance container from the DHCP image with eth0 on
// the test's managed network; dhcp is its MIGRATE_DHCP ("" asks for a
// lease and sets the address).
func netStep(t *testing.T, p *incus.Provider, name, dhcp string, extra map[string]cty.Value) *step {
	config := map[string]string{}
	if dhcp != "" {
		config["environment.MIGRATE_DHCP"] = dhcp
	}
	cfg := map[string]cty.Value{
		"name":    str(name),
		"type":    str("container"),
		"image":   str(incustest.NetImage),
		"start":   cty.True,
		"config":  strMap(config),
		"devices": devMap(map[string]map[string]string{"eth0": {"type": "nic", "network": incustest.Network}}),
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return newStep(t, p, incus.Instance, "node", cfg)
}

func outputs(v cty.Value) map[string]string {
	out := map[string]string{}
	for k, x := range v.AsValueMap() {
		out[k] = x.AsString()
	}
	return out
}

// TestInstanceAddressOutputs: with wait_for = "ipv4", apply returns once
// the guest has the address its DHCP lease gave; the outputs carry it, the
// status and the MAC, and Read (a resumed run) reports the same.
func TestInstanceAddressOutputs(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("addr")
	cleanupInstance(t, c, name)
	s := netStep(t, p, name, "", map[string]cty.Value{"wait_for": str("ipv4"), "wait_timeout": str("60s")})
	pl := s.mustPlan(nil)
	wantContains(t, "the plan", pl.Diff, "then wait up to 60s for an IPv4 address of the first NIC (wait_for)\n  rollback: delete the instance")
	r := s.mustApply(pl.Private, nil)
	wantContains(t, "the re-plan", s.mustPlan(priorOf(r)).Diff, "nothing to change\n  then wait up to 60s for an IPv4 address")
	out := outputs(r.Outputs)
	ip, err := netip.ParseAddr(out["ipv4"])
	// The lab's network is the loopback range (lab/incushost's doc).
	if err != nil || !ip.Is4() || !(ip.IsPrivate() || incustest.Lab() && ip.IsLoopback()) {
		t.Fatalf("ipv4 output = %q (%v), outputs %v", out["ipv4"], err, out)
	}
	i := inst(t, c, name)
	if out["status"] != "Running" || out["mac"] != i.Config["volatile.eth0.hwaddr"] || out["mac"] == "" || out["name"] != name || out["type"] != "container" {
		t.Errorf("outputs = %v; volatile.eth0.hwaddr %q", out, i.Config["volatile.eth0.hwaddr"])
	}
	if out["ipv6"] != "" {
		t.Errorf("ipv6 = %q on a network without IPv6 (a link-local address is not global)", out["ipv6"])
	}
	st, err := c.InstanceState(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	guest := false
	for _, a := range st.Network["eth0"].Addresses {
		guest = guest || a.Address == out["ipv4"]
	}
	if !guest {
		t.Errorf("the guest's eth0 does not have %s: %+v", out["ipv4"], st.Network["eth0"])
	}
	rd := s.read(priorOf(r))
	if rd.Observation != providers.Present || !rd.Outputs.RawEquals(r.Outputs) {
		t.Errorf("Read = %v %s, outputs %v, want %v", rd.Observation, rd.Detail, rd.Outputs.GoString(), r.Outputs.GoString())
	}
}

// TestInstanceAddressFromLease: a guest the daemon cannot see an address
// in (as a VM without the agent) takes a lease without setting it; the
// ipv4 output comes from the managed network's lease of its MAC.
func TestInstanceAddressFromLease(t *testing.T) {
	t.Parallel()
	incustest.SkipInLab(t, "reports every NIC's address itself (no DHCP client in the guest), so the lease fallback is never needed")
	c := client(t)
	p := provider(t, nil)
	name := unique("lease")
	cleanupInstance(t, c, name)
	s := netStep(t, p, name, "lease", map[string]cty.Value{"wait_for": str("ipv4"), "wait_timeout": str("60s")})
	r := s.mustApply(s.mustPlan(nil).Private, nil)
	out := outputs(r.Outputs)
	st, err := c.InstanceState(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Network["eth0"].Addresses {
		if a.Family == "inet" {
			t.Fatalf("the guest set %s itself: the lease fallback is not what was tested", a.Address)
		}
	}
	leases, err := c.NetworkLeases(ctxT(t, 10*time.Second), incustest.Network)
	if err != nil {
		t.Fatal(err)
	}
	var leased string
	for _, l := range leases {
		if strings.EqualFold(l.Hwaddr, out["mac"]) {
			leased = l.Address
		}
	}
	if leased == "" || out["ipv4"] != leased {
		t.Errorf("ipv4 output %q, lease of MAC %q: %q (leases %+v)", out["ipv4"], out["mac"], leased, leases)
	}
}

// TestInstanceWaitTimeout: wait_for on an instance that gets no address
// fails after wait_timeout naming what was last seen; the instance stays
// undoable, and Read sends a resumed run to apply (and wait) again.
func TestInstanceWaitTimeout(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)

	// On no network at all.
	name := unique("nonet")
	cleanupInstance(t, c, name)
	s := newStep(t, p, incus.Instance, "lonely", map[string]cty.Value{
		"name": str(name), "type": str("container"), "image": str(testImage), "start": cty.True,
		"wait_for": str("ipv4"), "wait_timeout": str("2s"),
	})
	start := time.Now()
	r, log := s.apply(ctxT(t, 60*time.Second), s.mustPlan(nil).Private, nil)
	if took := time.Since(start); took < 2*time.Second || took > 30*time.Second {
		t.Errorf("the wait took %s, want about 2s", took)
	}
	wantDiag(t, r.Diagnostics, "No IPv4 Address", `instance "`+name+`" reported no IPv4 address within 2s (wait_timeout)`, "Last seen: status Running, no NIC")
	wantContains(t, "the log", log, "waiting up to 2s for an IPv4 address")
	if r.Revert == nil || !strings.Contains(r.Revert.Description, "delete instance "+name) {
		t.Errorf("revert data after a failed wait = %+v", r.Revert)
	}
	if rd := s.read(nil); rd.Observation != providers.Drifted || !strings.Contains(rd.Detail, "no ipv4 address yet") {
		t.Errorf("Read after a failed wait = %v %q", rd.Observation, rd.Detail)
	}

	// On the managed network, asking for no lease: the message names the
	// NIC, its MAC and the missing lease.
	// The lab gives every NIC its address at once (no DHCP to withhold).
	if !incustest.Lab() {
		name = unique("nodhcp")
		cleanupInstance(t, c, name)
		s = netStep(t, p, name, "none", map[string]cty.Value{"wait_for": str("ipv4"), "wait_timeout": str("1s")})
		r, _ = s.apply(ctxT(t, 60*time.Second), s.mustPlan(nil).Private, nil)
		mac := inst(t, c, name).Config["volatile.eth0.hwaddr"]
		wantDiag(t, r.Diagnostics, "No IPv4 Address", "within 1s", "Last seen: status Running, NIC eth0, MAC "+mac, "no lease for it on network "+incustest.Network)
	}

	// A stopped instance gets no address: said at once, not after the timeout.
	name = unique("stopped")
	cleanupInstance(t, c, name)
	s = netStep(t, p, name, "", map[string]cty.Value{"start": cty.False, "wait_for": str("ipv4"), "wait_timeout": str("10m")})
	r, _ = s.apply(ctxT(t, 60*time.Second), s.mustPlan(nil).Private, nil)
	wantDiag(t, r.Diagnostics, "Instance Not Running", "it is stopped", "Set start = true")
}

// TestPickNIC: which NIC the outputs report, and the lease fallback, on
// answers shaped as a VM's (with and without the agent).
func TestPickNIC(t *testing.T) {
	vm := &incusapi.Instance{
		Name: "talos", Status: "Running",
		ExpandedDevices: map[string]map[string]string{
			"root": {"type": "disk", "path": "/", "pool": "default"},
			"eth1": {"type": "nic", "network": "lan"},
			"eth0": {"type": "nic", "network": "incusbr0"},
		},
		ExpandedConfig: map[string]string{"volatile.eth0.hwaddr": "10:66:6A:00:00:01", "volatile.eth1.hwaddr": "10:66:6a:00:00:02"},
	}
	agent := &incusapi.InstanceState{Status: "Running", Network: map[string]incusapi.InstanceStateNetwork{
		"lo": {Type: "loopback", Addresses: []incusapi.InstanceStateAddress{{Family: "inet", Address: "127.0.0.1", Scope: "local"}}},
		"enp5s0": {Hwaddr: "10:66:6a:00:00:01", Addresses: []incusapi.InstanceStateAddress{
			{Family: "inet6", Address: "fe80::1", Scope: "link"},
			{Family: "inet", Address: "10.0.0.5", Netmask: "24", Scope: "global"},
			{Family: "inet6", Address: "fd00::5", Netmask: "64", Scope: "global"},
		}},
		"enp6s0": {Hwaddr: "10:66:6a:00:00:02", Addresses: []incusapi.InstanceStateAddress{{Family: "inet", Address: "192.168.1.9", Scope: "global"}}},
	}}
	for _, tc := range []struct{ nic, ipv4, ipv6, mac string }{
		{"", "10.0.0.5", "fd00::5", "10:66:6a:00:00:01"}, // eth0: first by name, found by its MAC
		{"eth1", "192.168.1.9", "", "10:66:6a:00:00:02"},
		{"enp6s0", "192.168.1.9", "", "10:66:6a:00:00:02"}, // a guest interface name
	} {
		a, err := incus.PickNIC(vm, agent, tc.nic)
		if err != nil || a.IPv4 != tc.ipv4 || a.IPv6 != tc.ipv6 || a.MAC != tc.mac || a.Status != "Running" {
			t.Errorf("nic %q: %+v %v, want %s %s %s", tc.nic, a, err, tc.ipv4, tc.ipv6, tc.mac)
		}
	}
	if _, err := incus.PickNIC(vm, agent, "eth9"); err == nil || !strings.Contains(err.Error(), "NIC devices: eth0, eth1; guest interfaces: enp5s0, enp6s0, lo") {
		t.Errorf("an unknown nic: %v", err)
	}

	// Without the agent the daemon reports no interface: the lease of the
	// MAC on the NIC's managed network tells the address.
	a, err := incus.PickNIC(vm, &incusapi.InstanceState{Status: "Running"}, "")
	if err != nil || a.IPv4 != "" || a.Network != "incusbr0" || !strings.Contains(a.Seen, "no agent in the VM?") {
		t.Fatalf("without the agent: %+v %v", a, err)
	}
	incus.FromLeases(&a, []incusapi.NetworkLease{
		{Address: "10.0.0.1", Type: "gateway"},
		{Address: "10.0.0.7", Hwaddr: "10:66:6a:00:00:09", Type: "dynamic"},
		{Address: "10.0.0.6", Hwaddr: "10:66:6A:00:00:01", Type: "dynamic"},
		{Address: "fd00::6", Hwaddr: "10:66:6a:00:00:01", Type: "dynamic"},
	})
	if a.IPv4 != "10.0.0.6" || a.IPv6 != "fd00::6" || !strings.Contains(a.Seen, "network incusbr0 has a lease for it") {
		t.Errorf("from the leases: %+v", a)
	}
	b := incus.Addresses{MAC: "10:66:6a:00:00:01", Network: "incusbr0"}
	incus.FromLeases(&b, []incusapi.NetworkLease{{Address: "10.0.0.7", Hwaddr: "10:66:6a:00:00:09"}})
	if b.IPv4 != "" || !strings.Contains(b.Seen, "no lease for it on network incusbr0") {
		t.Errorf("no lease of that MAC: %+v", b)
	}
}

// TestWaitForValidation: wait_for and wait_timeout are checked before
// anything runs.
func TestWaitForValidation(t *testing.T) {
	addr := phases.Address{Type: incus.Instance, Name: "node"}
	for _, tc := range []struct {
		waitFor, timeout, want string
	}{
		{"ipv5", "", `must be "ipv4" or "ipv6", not "ipv5"`},
		{"ipv4", "soon", `must be a duration above zero, such as "5m", not "soon"`},
		{"ipv4", "-1s", "above zero"},
	} {
		s := incus.InstanceSpec{Type: "container", Image: "x", WaitFor: tc.waitFor, WaitTimeout: tc.timeout}
		d := incus.Normalize(addr, &s)
		if !d.HasErrors() || !strings.Contains(d.Err().Error(), tc.want) {
			t.Errorf("wait_for %q wait_timeout %q: %v, want %q", tc.waitFor, tc.timeout, d.Err(), tc.want)
		}
	}
	s := incus.InstanceSpec{Type: "container", Image: "x", WaitFor: "ipv6", WaitTimeout: "90s"}
	if d := incus.Normalize(addr, &s); d.HasErrors() {
		t.Errorf("a valid wait: %v", d.Err())
	}
}

// profile makes an Incus profile with the given config keys (through the
// incus CLI: incusapi has no profile endpoints), deleted after every
// instance the test makes later.
func profile(t *testing.T, config map[string]string) string {
	t.Helper()
	name := unique("prof")
	if out, err := exec.Command("incus", "profile", "create", name).CombinedOutput(); err != nil {
		t.Fatalf("incus profile create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("incus", "profile", "delete", name).Run() })
	for k, v := range config {
		if out, err := exec.Command("incus", "profile", "set", name, k, v).CombinedOutput(); err != nil {
			t.Fatalf("incus profile set: %v: %s", err, out)
		}
	}
	return name
}

// loadAddress loads testdata/address for instance name, writing to out.
func loadAddress(t testing.TB, name, prof, out string) *phases.Runbook {
	t.Helper()
	dir, err := filepath.Abs("testdata/address")
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]phases.Schema{}
	for n, f := range factories {
		schemas[n] = f().Schema()
	}
	rb, diags := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{Dir: dir, Schemas: schemas,
		Vars: []string{"name=" + name, "image=" + incustest.NetImage, "network=" + incustest.Network, "out=" + out, "profile=" + prof}}).Load()
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	return rb
}

// wantHanded checks what the exec step after the instance received.
func wantHanded(t *testing.T, c *incusapi.Client, name, out string) {
	t.Helper()
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(got))
	mac := inst(t, c, name).Config["volatile.eth0.hwaddr"]
	if len(fields) != 3 || !netip.MustParseAddr(fields[0]).Is4() || fields[1] != mac || fields[2] != "Running" {
		t.Fatalf("the exec step got %q, want an IPv4 address, MAC %s and Running", got, mac)
	}
}

// TestAddressThroughEngine: in one run, the step after the instance gets
// its address (planned as known after apply); a second plan reads the
// outputs back and changes nothing; rollback deletes the instance.
func TestAddressThroughEngine(t *testing.T) {
	t.Parallel()
	c := client(t)
	prof := profile(t, nil)
	name := unique("engine")
	cleanupInstance(t, c, name)
	out := filepath.Join(t.TempDir(), "address")
	rb := loadAddress(t, name, prof, out)
	stateDir := t.TempDir()
	if _, err := runPhase(t, rb, stateDir, "node"); err != nil {
		t.Fatalf("run: %v", err)
	}
	wantHanded(t, c, name, out)

	e, done := migration(t, rb, stateDir)
	again, diags := e.Plan(context.Background(), engine.PlanOptions{Phases: []string{"node"}})
	done()
	if diags.HasErrors() || again.HasChanges() {
		for _, sp := range again.Phases[0].Steps {
			t.Logf("re-plan %s: %s %s", sp.Addr, sp.Action, sp.ReasonCode)
		}
		t.Fatalf("re-plan: %v changes=%v", diags.Err(), again.HasChanges())
	}

	rollbackAll(t, rb, stateDir)
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); !incusapi.IsNotFound(err) {
		t.Errorf("after rollback the instance is still there (%v)", err)
	}
}

// TestAddressCrashResume kills (SIGKILL) a migrate process while it waits
// for the address of the instance it created (the guest's profile holds
// its DHCP back); once the guest asks, the next run adopts the instance
// without creating it again, waits, and hands the address on.
func TestAddressCrashResume(t *testing.T) {
	t.Parallel()
	incustest.SkipInLab(t, "has no DHCP to withhold an address from (MIGRATE_DHCP=none is the test image's init's, which the lab does not run)")
	c := client(t)
	prof := profile(t, map[string]string{"environment.MIGRATE_DHCP": "none"})
	name := unique("crash")
	cleanupInstance(t, c, name)
	out := filepath.Join(t.TempDir(), "address")
	dir := t.TempDir()

	// Running, on a guest that asks for no lease: the helper is past the
	// create and the start, and waits for an address that does not come.
	log := killHelper(t, "TestHelperRunAddress", []string{"MIGRATE_INCUS_ADDRESS_HELPER=" + strings.Join([]string{dir, name, prof, out}, ",")},
		60*time.Second, 0, "started the instance", func() bool {
			i, _, err := c.Instance(ctxT(t, 10*time.Second), name)
			return err == nil && i.Status == "Running"
		})
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("the exec step ran before the kill; the test proves nothing:\n%s", log)
	}
	wantRunning(t, dir, phases.Address{Type: incus.Instance, Name: "node"}, "the instance step")
	created := inst(t, c, name).CreatedAt

	// The guest asks for its lease from now on.
	if out, err := exec.Command("incus", "profile", "unset", prof, "environment.MIGRATE_DHCP").CombinedOutput(); err != nil {
		t.Fatalf("incus profile unset: %v: %s", err, out)
	}
	if err := c.SetState(ctxT(t, 60*time.Second), name, incusapi.InstanceStatePut{Action: "restart", Force: true}); err != nil {
		t.Fatal(err)
	}

	rb := loadAddress(t, name, prof, out)
	plan, err := runPhase(t, rb, dir, "node")
	if err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	for _, sp := range plan.Phases[0].Steps {
		t.Logf("resume plan %s: %s (%s)", sp.Addr, sp.Action, sp.ReasonCode)
	}
	wantHanded(t, c, name, out)
	if i := inst(t, c, name); !i.CreatedAt.Equal(created) || i.Config[incus.KeyCreatedBy] != "incus_instance.node" {
		t.Errorf("the resumed run made the instance again: created %v, then %v (%v)", created, i.CreatedAt, i.Config)
	}
	rollbackAll(t, rb, dir)
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); !incusapi.IsNotFound(err) {
		t.Errorf("after rollback the instance is still there (%v)", err)
	}
}

// TestHelperRunAddress is the migrate process TestAddressCrashResume kills.
func TestHelperRunAddress(t *testing.T) {
	env := os.Getenv("MIGRATE_INCUS_ADDRESS_HELPER")
	if env == "" {
		return // not a helper: nothing to do
	}
	a := strings.Split(env, ",")
	_, err := runPhase(t, loadAddress(t, a[1], a[2], a[3]), a[0], "node")
	fmt.Println("helper finished:", err)
	os.Exit(0)
}

// TestInFlightCreatedNotStarted: a run killed after its creation of the
// instance and before the start and the wait for its address leaves an
// instance that exists, stopped, without an address. Read in flight, it
// is not done (adopted, its empty ipv4 output would reach the steps
// that connect to it); applied again, it is started and waited for.
func TestInFlightCreatedNotStarted(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("inflight")
	cleanupInstance(t, c, name)
	s := netStep(t, p, name, "", map[string]cty.Value{"wait_for": str("ipv4"), "wait_timeout": str("60s")})
	// What the killed run had done: the instance, marked as the step's, not started.
	if err := c.CreateInstance(ctxT(t, 60*time.Second), incusapi.InstancesPost{
		Name: name, Type: "container", Source: incusapi.InstanceSource{Type: "image", Alias: incustest.NetImage},
		InstancePut: incusapi.InstancePut{
			Config:  map[string]string{incus.KeyCreatedBy: s.addr.String()},
			Devices: map[string]map[string]string{"eth0": {"type": "nic", "network": incustest.Network}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	rd := s.p.Read(ctxT(t, 60*time.Second), providers.ReadRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, InFlight: true})
	if rd.Diagnostics.HasErrors() || rd.Observation == providers.Present {
		t.Fatalf("read in flight: %v %q (%v): an instance without the address wait_for names was taken as done", rd.Observation, rd.Detail, rd.Diagnostics.Err())
	}
	r := s.mustApply(nil, nil)
	if out := outputs(r.Outputs); out["ipv4"] == "" || out["status"] != "Running" {
		t.Fatalf("applied again: outputs %v", out)
	}
}
