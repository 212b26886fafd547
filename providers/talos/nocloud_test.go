package talos_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/secret"
)

// freeAddr is an address where nothing answers yet: the VM's, before
// the step that makes it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// With first_install = "nocloud" the plan says the config goes through
// the Incus host's API; the apply sends nothing and gives the config as
// user_data, from which a nocloud node installs (no ApplyConfiguration)
// and then answers with the cluster's certificates.
func TestNocloudFirstInstallGoesThroughTheHost(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks) // only its bundle and talosconfig are used
	at := freeAddr(t)
	conf := l.config(false)
	conf["endpoints"] = strs(at)
	p := l.provider(t, conf)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "first_install": cty.StringVal("nocloud")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	for _, want := range []string{"install: first config through the Incus host's API", "nothing is sent over the LAN", "cloud-init.user-data", "cloud-init:config", "mTLS with the cluster's client certificate"} {
		if !strings.Contains(pr.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, pr.Diff)
		}
	}
	if strings.Contains(pr.Diff, "warning: maintenance mode") {
		t.Errorf("the nocloud plan speaks of maintenance mode:\n%s", pr.Diff)
	}
	if pr.Outputs.GetAttr("user_data").IsKnown() {
		t.Error("user_data is known at plan: the cluster's keys would be in the saved plan")
	}
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	ud := r.Outputs.GetAttr("user_data")
	if !ud.HasMark("sensitive") && !ud.IsMarked() {
		t.Error("user_data is not marked sensitive")
	}
	userData, _ := ud.Unmark()
	if !strings.Contains(userData.AsString(), "machine:") {
		t.Fatalf("user_data is no machine config: %q", userData.AsString())
	}
	assertNoSecrets(t, "the log", log.String(), bundleSecretsOf(t, l.secrets))

	// The VM boots a nocloud image with the config on its drive.
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: maintDisks, RebootDuration: 100 * time.Millisecond,
		Hostname: "lab-node", Platform: "nocloud", UserData: []byte(userData.AsString())})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(at); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	if n.Maintenance() || n.PlatformConfig() == "" || len(n.Applies()) != 0 {
		t.Fatalf("the node: maintenance %v, platform config %q, applies %v", n.Maintenance(), n.PlatformConfig(), n.Applies())
	}
	// It answers the talosconfig of the bundle: the step is present.
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: &providers.Prior{Private: r.Private}})
	if rr.Observation != providers.Present || rr.Diagnostics.HasErrors() {
		t.Fatalf("Read after the install: %v %v %s", rr.Observation, rr.Diagnostics, rr.Detail)
	}
	// its user_data, which the state keeps redacted, is read back the same
	if got, _ := rr.Outputs.GetAttr("user_data").Unmark(); !got.IsKnown() || got.AsString() != userData.AsString() {
		t.Error("Read does not give back the user_data the VM step refers to")
	}
}

// A machine in maintenance mode where the config was to go through the
// host is refused at plan and apply, and sent nothing.
func TestNocloudRefusesAMaintenanceAnswer(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "first_install": cty.StringVal("nocloud")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Node In Maintenance Mode") || !strings.Contains(err.Error(), "Nothing is sent") {
		t.Errorf("Plan: %v", err)
	}
	planned := []byte(`{"nodes":{},"rendered":"x","nocloud":true}`)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: planned, Log: &bytes.Buffer{}})
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Node In Maintenance Mode") {
		t.Errorf("Apply: %v", err)
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("the node got ApplyConfiguration: %+v", a)
	}
	bad := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "first_install": cty.StringVal("lan")}))
	if err := bad.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), `must be "nocloud"`) {
		t.Errorf("first_install = \"lan\": %v", err)
	}
}

// user_data is the whole config, with the cluster's keys: a scrubber that
// learns it (the engine's, the VM step's provider's) must scrub its keys
// and tokens wherever they turn up, in their encoded forms and a line of
// the config alone, and still the whole config, but not its ordinary
// words (the node's name, the endpoint, a volume's tag): they are in
// every plan and log line of the run.
func TestUserDataScrubsItsKeysNotItsWords(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	conf := l.config(false)
	conf["endpoints"] = strs(freeAddr(t))
	p := l.provider(t, conf)
	// A registry password of each canary: a secret that a patch adds.
	registries := "machine:\n  registries:\n    config:\n"
	for i, cn := range providertest.Canaries {
		q, _ := json.Marshal(cn.Value)
		registries += fmt.Sprintf("      registry-%d.example:\n        auth:\n          username: migrate\n          password: %s\n", i, q)
	}
	l.write(t, "patches/registries.yaml", registries)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/registries.yaml"), "first_install": cty.StringVal("nocloud")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: io.Discard})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	s := &secret.Scrubber{}
	s.AddMarked(r.Outputs)
	userData, _ := r.Outputs.GetAttr("user_data").Unmark()
	doc := userData.AsString()

	for _, word := range []string{"lab-node", "https://127.0.0.1:6443", "incus_data", "controlplane", "/var/mnt/data"} {
		line := "node " + word + " is up"
		if got := s.Text(line); got != line {
			t.Errorf("an ordinary word of the config is redacted: %q became %q", line, got)
		}
	}
	if got := s.Text("before " + doc + " after"); got != "before "+phases.Redacted+" after" {
		t.Errorf("the whole config is not scrubbed: %.200q", got)
	}
	for _, key := range bundleSecretsOf(t, l.secrets) {
		for _, form := range []string{key, base64.StdEncoding.EncodeToString([]byte(key)), strconv.Quote(key)} {
			if got := s.Text("x " + form + " y"); strings.Contains(got, key) || strings.Contains(got, form) {
				t.Errorf("a secret of the bundle (%.12s...) is not scrubbed in %q", key, got)
			}
		}
	}
	// Each canary is scrubbed in every form a scrubber that knows it
	// alone scrubs.
	for _, cn := range providertest.Canaries {
		var alone secret.Scrubber
		alone.Add(cn.Value)
		for _, form := range providertest.Encodings(cn.Value) {
			in := "x " + form + " y"
			if got := s.Text(in); strings.Contains(got, form) && !strings.Contains(alone.Text(in), form) {
				t.Errorf("the %s canary, a registry password in the config, is not scrubbed as %q: %q", cn.Name, form, got)
			}
		}
	}
	for _, line := range strings.Split(doc, "\n") {
		if strings.Contains(line, "key: ") || strings.Contains(line, "token: ") || strings.Contains(line, "secret: ") {
			assertNoSecrets(t, "a line of user_data", s.Text(line), bundleSecretsOf(t, l.secrets))
		}
	}
}

// A run killed after the config was given as user_data and before the VM
// was made: the next run reads the step back for the VM step that refers
// to user_data (the state keeps it redacted). Nothing answers at the
// node's address yet, which is what the record expects: the step is
// present with its user_data, and drifted once its patch changed.
func TestNocloudReadBeforeTheVM(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	conf := l.config(false)
	conf["endpoints"] = strs(freeAddr(t))
	p := l.provider(t, conf)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "first_install": cty.StringVal("nocloud")})
	pr := plan(p, talos.MachineConfig, cfg)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: io.Discard})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	prior := &providers.Prior{Private: r.Private}
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	if rr.Observation != providers.Present || rr.Diagnostics.HasErrors() {
		t.Fatalf("Read before the VM: %v %v %s", rr.Observation, rr.Diagnostics.Err(), rr.Detail)
	}
	want, _ := r.Outputs.GetAttr("user_data").Unmark()
	if got, _ := rr.Outputs.GetAttr("user_data").Unmark(); !got.RawEquals(want) {
		t.Error("Read before the VM does not give back the user_data")
	}
	l.write(t, "patches/node.yaml", strings.Replace(briefPatch, "hostname: lab-node", "hostname: other-node", 1))
	if rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior}); rr.Observation != providers.Drifted {
		t.Errorf("Read with another patch before the VM: %v %v %s", rr.Observation, rr.Diagnostics.Err(), rr.Detail)
	}
}
