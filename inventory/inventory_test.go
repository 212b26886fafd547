package inventory_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// recorder is a proxy in front of a unix socket that keeps the method
// and path of every request.
type recorder struct {
	mu    sync.Mutex
	calls []string
	// before, when set, runs before a request goes to the host: what
	// another client does meanwhile.
	before func(method, path string)
}

func (r *recorder) record(method, path string) {
	r.mu.Lock()
	r.calls = append(r.calls, method+" "+path)
	before := r.before
	r.mu.Unlock()
	if before != nil {
		before(method, path)
	}
}

// labHost starts the lab home server and a client of its Incus host
// through a recording proxy.
func labHost(t *testing.T) (*home.Home, *incusapi.Client, *recorder) {
	t.Helper()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 31})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	// The proxy speaks to the host on a socket of its own (the test's:
	// the home is HTTPS only).
	sock := filepath.Join(h.Dir(), "test.socket")
	if err := h.Incus().Listen(sock); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rec.record(pr.In.Method, pr.In.URL.Path)
			pr.SetURL(&url.URL{Scheme: "http", Host: "incus"})
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	front := filepath.Join(h.Dir(), "front.socket")
	l, err := net.Listen("unix", front)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c, err := incusapi.New(incusapi.Options{Socket: front})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return h, c, rec
}

// world is the host's state as the API shows it, for a before and after.
func world(t *testing.T, c *incusapi.Client) string {
	t.Helper()
	ctx := t.Context()
	var parts []any
	insts, err := c.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range insts {
		snaps, err := c.Snapshots(ctx, i.Name)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, i, snaps)
	}
	pools, err := c.StoragePoolsAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		vols, err := c.StorageVolumesAll(ctx, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p, vols)
	}
	nets, _ := c.Networks(ctx)
	profs, _ := c.Profiles(ctx)
	parts = append(parts, nets, profs)
	b, err := json.MarshalIndent(parts, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func findingsOf(fs []inventory.Finding, code string) []inventory.Finding {
	var out []inventory.Finding
	for _, f := range fs {
		if f.Code == code {
			out = append(out, f)
		}
	}
	return out
}

// TestReadTheLabHost: the brief's host, read as migrate init reads it:
// the old VMs and what runs in them, the services VM's missing GPU, the
// autostart, the pools and networks by their names; and nothing on the
// host changed (only GETs and HEADs went out, and the world is the same).
func TestReadTheLabHost(t *testing.T) {
	h, c, rec := labHost(t)
	// A VM of another kind beside the old ones: booted from an ISO (here
	// one with nothing to boot), it runs no Incus agent.
	iso := filepath.Join(t.TempDir(), "empty.iso")
	if err := os.WriteFile(iso, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := c.CreateInstance(t.Context(), incusapi.InstancesPost{Name: "appliance", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"}, Start: true,
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"cdrom": {"type": "disk", "source": iso, "boot.priority": "10"}}}})
	if err != nil {
		t.Fatal(err)
	}
	before := world(t, c)
	eventsBefore, err := home.ReadEvents(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	rec.calls = nil

	host, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	checkReadOnly(t, rec.calls)
	if len(rec.calls) < 10 {
		t.Errorf("the proxy saw too few requests to have read the host: %v", rec.calls)
	}
	if after := world(t, c); after != before {
		t.Errorf("the host changed while it was read:\nbefore %s\nafter %s", before, after)
	}
	ev, _ := home.ReadEvents(h.Dir())
	checkReadOnlyCommands(t, ev[len(eventsBefore):])

	apps := map[string][]string{}
	for _, i := range host.Instances {
		for _, a := range i.Apps {
			apps[i.Name] = append(apps[i.Name], a.Name)
		}
	}
	want := map[string][]string{"services": {"Jellyfin", "Frigate", "Samba"}, "matrix": {"Synapse"}, "k3s": {"k3s"}}
	for vm, w := range want {
		if !slices.Equal(apps[vm], w) {
			t.Errorf("apps of %s: %v, want %v", vm, apps[vm], w)
		}
	}
	if a := host.Instance("appliance"); a == nil || a.Agent != inventory.AgentAbsent || len(a.Apps) != 0 {
		t.Errorf("a VM without the agent: %+v", a)
	}
	svc := host.Instance("services")
	if svc == nil || svc.Agent != inventory.AgentRunning || len(svc.GPUDevices()) != 0 {
		t.Fatalf("services: %+v", svc)
	}
	if svc.Apps[0].HWAccel != "vaapi (/etc/jellyfin/encoding.xml)" || svc.Apps[1].HWAccel != "preset-vaapi (/opt/frigate/config/config.yml)" {
		t.Errorf("the hardware decoding the apps are set for: %+v", svc.Apps)
	}

	site, guesses, err := inventory.Choose(tmpl(t), host, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if site.ServicesVM != "services" || site.MatrixVM != "matrix" || site.K3sVM != "k3s" ||
		site.StoragePool != home.StoragePool || site.DataPool != home.DataPool || site.DataVolume != home.DataVolume ||
		site.LANBridge != "enp5s0" || site.MatrixDomain != "matrix.example.org" || site.MatrixURL != "https://matrix.example.org" ||
		site.RetainUntil != "2027-02-02" {
		t.Errorf("the site: %+v", site)
	}
	if site.NodeMAC == site.RehearsalMAC || !strings.HasPrefix(site.NodeMAC, "10:66:6a:") {
		t.Errorf("the new MACs: %s %s", site.NodeMAC, site.RehearsalMAC)
	}
	if site.TODO["node_address"] == "" || !strings.Contains(site.TODO["node_address"], site.NodeMAC) {
		t.Errorf("node_address is not left to the user: %v", site.TODO)
	}

	fs := append(guesses, inventory.Check(host, site)...)
	gpu := findingsOf(fs, inventory.CodeVMNoGPU)
	if len(gpu) != 1 || gpu[0].Subject != "instance services" || !strings.Contains(gpu[0].Seen, "decoding ran on the CPU") || !strings.Contains(gpu[0].Seen, "vaapi") {
		t.Errorf("the services VM's missing GPU: %+v", gpu)
	}
	for _, code := range []string{inventory.CodeAutostart} {
		var subjects []string
		for _, f := range findingsOf(fs, code) {
			subjects = append(subjects, f.Subject)
		}
		if !slices.Equal(subjects, []string{"instance matrix", "instance services"}) {
			t.Errorf("%s findings: %v", code, subjects)
		}
	}
	if site.IGPUPCI != "0000:00:02.0" || site.NodeCPU != 6 || site.NodeMemory != "24GiB" {
		t.Errorf("the iGPU or the node's size: %+v", site)
	}
	if na := findingsOf(fs, inventory.CodeNotInMove); len(na) != 1 || na[0].Subject != "instance appliance" {
		t.Errorf("the VM the move leaves alone: %+v", na)
	}
	if nb := findingsOf(fs, inventory.CodeNoLANBridge); len(nb) != 0 {
		t.Errorf("the LAN bridge was not found: %+v", nb)
	}
	for _, f := range fs {
		if f.Seen == "" || f.Do == "" || f.Code == "" || f.Subject == "" {
			t.Errorf("a finding without what was seen or what to do: %+v", f)
		}
	}
	t.Logf("findings: %+v", fs)

	// An instance deleted between the listing and the reading of its
	// snapshots (another client's doing) is left out, not an error.
	direct, err := incusapi.New(incusapi.Options{Socket: filepath.Join(h.Dir(), "test.socket")})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	rec.mu.Lock()
	rec.before = func(method, path string) {
		if path == "/1.0/instances/appliance/snapshots" {
			ctx := context.Background()
			if err := direct.SetState(ctx, "appliance", incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
				t.Errorf("stopping the appliance meanwhile: %v", err)
			}
			if err := direct.DeleteInstance(ctx, "appliance"); err != nil {
				t.Errorf("deleting the appliance meanwhile: %v", err)
			}
		}
	}
	rec.mu.Unlock()
	again, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatalf("a read while an instance goes: %v", err)
	}
	if again.Instance("appliance") != nil || again.Instance("services") == nil {
		t.Errorf("the instances read while the appliance went: %+v", again.Instances)
	}
}
