package incushost_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

func TestHTTPSTrustsOnlyKnownClients(t *testing.T) {
	s, local := lab(t, incushost.Options{})
	addr, err := s.ServeHTTPS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	crt, key := clientCert(t)
	c, err := incusapi.New(incusapi.Options{URL: addr.String(), ClientCert: crt, ClientKey: key, ServerCert: s.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var untrusted *incusapi.UntrustedError
	if _, err := c.Server(ctxT(t)); !errors.As(err, &untrusted) {
		t.Fatalf("GET /1.0 by an unknown client: %v", err)
	}
	if _, err := c.Instances(ctxT(t)); !errors.As(err, &untrusted) || !strings.Contains(err.Error(), "does not trust") {
		t.Fatalf("a list by an unknown client: %v", err)
	}
	if err := local.AddCertificate(ctxT(t), "test", crt); err != nil {
		t.Fatal(err)
	}
	srv, err := c.Server(ctxT(t))
	if err != nil || srv.Auth != "trusted" {
		t.Fatalf("GET /1.0 by a trusted client: %+v %v", srv, err)
	}
	launch(t, c, "box", true)
	if code, out, _ := run(t, c, "box", "echo", "over https"); code != 0 || out != "over https\n" {
		t.Fatalf("exec over HTTPS: %d %q", code, out)
	}
	// Another server certificate than the pinned one is refused.
	other, err := incushost.New(incushost.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := incusapi.New(incusapi.Options{URL: addr.String(), ClientCert: crt, ClientKey: key, ServerCert: other.CertPEM()})
	var certErr *incusapi.ServerCertError
	if _, err := wrong.Server(ctxT(t)); !errors.As(err, &certErr) {
		t.Fatalf("a wrong pinned certificate: %v", err)
	}
	fp, _ := incusapi.CertificateFingerprint(crt)
	if err := local.DeleteCertificate(ctxT(t), fp); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Instances(ctxT(t)); !errors.As(err, &untrusted) {
		t.Fatalf("after the certificate was removed: %v", err)
	}
}

// raw sends a request on the socket and decodes the envelope.
func raw(t *testing.T, sock, method, path string, body string) (int, map[string]any) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequestWithContext(ctxT(t), method, "http://lab"+path, strings.NewReader(body))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, out
}

func TestOperationsFailAtWaitAndVanish(t *testing.T) {
	dir := t.TempDir()
	_, c := lab(t, incushost.Options{Dir: dir, OperationTTL: 300 * time.Millisecond})
	sock := filepath.Join(dir, "unix.socket")
	launch(t, c, "box", false)
	code, env := raw(t, sock, "PUT", "/1.0/instances/box/state", `{"action":"stop","timeout":-1}`)
	if code != http.StatusAccepted || env["type"] != "async" {
		t.Fatalf("a state change: %d %v", code, env)
	}
	op := env["operation"].(string)
	code, env = raw(t, sock, "GET", op+"/wait?timeout=-1", "")
	if code != http.StatusOK || env["type"] != "error" || env["error"] != "The instance is already stopped" || env["error_code"] != float64(400) {
		t.Fatalf("the wait of a failed stop: %d %v", code, env)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ = raw(t, sock, "GET", op, ""); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a finished operation did not vanish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// recursion=2: each instance with its state and snapshots.
	if code, env := raw(t, sock, "GET", "/1.0/instances?recursion=2", ""); code != http.StatusOK ||
		env["metadata"].([]any)[0].(map[string]any)["state"].(map[string]any)["status"] != "Stopped" {
		t.Fatalf("the full list: %d %v", code, env)
	}
	// The ETag header, and If-Match on PATCH.
	i, etag, err := c.Instance(ctxT(t), "box")
	if err != nil || etag == "" {
		t.Fatalf("no ETag: %v", err)
	}
	_ = i
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest("PATCH", "http://lab/1.0/instances/box", strings.NewReader(`{"config":{"user.x":"1"}}`))
	req.Header.Set("If-Match", `"not-`+etag[1:])
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("a PATCH with a wrong If-Match: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestSeedMakesTheOldVMs(t *testing.T) {
	dir := t.TempDir()
	s, c := lab(t, incushost.Options{Dir: dir, Seed: true})
	for _, name := range incushost.OldVMs {
		i := inst(t, c, name)
		if i.Status != "Running" || i.Type != "virtual-machine" || i.Config["user.lab"] == "" {
			t.Fatalf("old VM %s: %s %s %v", name, i.Status, i.Type, i.Config)
		}
	}
	if st, err := c.InstanceState(ctxT(t), "matrix"); err != nil || len(st.Network["eth0"].Addresses) == 0 {
		t.Fatalf("the old matrix VM's eth0: %+v %v", st, err)
	}
	if code, out, _ := run(t, c, "k3s", "cat", "/etc/rancher/k3s/k3s.yaml"); code != 0 || !strings.Contains(out, "server: https://") {
		t.Fatalf("k3s.yaml: %d %q", code, out)
	}
	// Synapse's stand-ins: systemctl records, sqlite3 backs up.
	if code, _, errs := run(t, c, "matrix", "systemctl", "stop", "matrix-synapse"); code != 0 {
		t.Fatalf("systemctl stop: %d %s", code, errs)
	}
	if code, _, errs := run(t, c, "matrix", "sqlite3", "/var/lib/matrix-synapse/homeserver.db", ".backup /root/backup.db"); code != 0 {
		t.Fatalf("sqlite3 .backup: %d %s", code, errs)
	}
	if code, out, _ := run(t, c, "matrix", "cat", "/root/systemctl.calls", "/root/backup.db"); code != 0 || out != "stop matrix-synapse\nSQLite format 3\x00 the rooms\n" {
		t.Fatalf("the stand-ins' traces: %d %q", code, out)
	}
	// The homelab's export of Synapse's data, as examples/homelab runs it.
	export := "set -e\nmkdir -p /root/synapse-export\n" +
		"sqlite3 /var/lib/matrix-synapse/homeserver.db \".backup /root/synapse-export/homeserver.db\"\n" +
		"tar -C /var/lib/matrix-synapse -cf /root/synapse-export/media.tar media\ntouch /root/synapse-export/.done\n"
	if code, _, errs := run(t, c, "matrix", "sh", "-c", export); code != 0 {
		t.Fatalf("the export: %d %s", code, errs)
	}
	if code, out, _ := run(t, c, "matrix", "tar", "-tf", "/root/synapse-export/media.tar"); code != 0 || !strings.Contains(out, "media/local_content/ab/cd/ef") {
		t.Fatalf("the media archive: %d %q", code, out)
	}
	if _, _, names, err := c.GetFile(ctxT(t), "matrix", "/root/synapse-export"); err != nil || len(names) != 3 {
		t.Fatalf("the export directory: %v %v", names, err)
	}
	if code, out, _ := run(t, c, "services", "cat", "/etc/samba/smb.conf"); code != 0 || !strings.Contains(out, "[media]") {
		t.Fatalf("smb.conf: %d %q", code, out)
	}
	// Synapse's configuration as Debian's, with secrets of its own: no
	// placeholder left, none the same as another, readable by root only.
	code, conf, _ := run(t, c, "matrix", "cat", "/etc/matrix-synapse/homeserver.yaml")
	secrets := regexp.MustCompile(`(?m)^(registration_shared_secret|macaroon_secret_key|form_secret): "([^"@]{50})"$`).FindAllStringSubmatch(conf, -1)
	if code != 0 || len(secrets) != 3 || secrets[0][2] == secrets[1][2] || !strings.Contains(conf, "database: /var/lib/matrix-synapse/homeserver.db") {
		t.Fatalf("homeserver.yaml: %d %v\n%s", code, secrets, conf)
	}
	if fi, err := os.Stat(filepath.Join(dir, "instances/matrix/rootfs/etc/matrix-synapse/homeserver.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("homeserver.yaml's mode: %v %v, want 0600", fi.Mode(), err)
	}
	// Jellyfin (Debian's package) and Frigate (Docker Compose) in services,
	// running until something stops them.
	for _, f := range []string{"/var/lib/jellyfin/data/jellyfin.db", "/var/lib/jellyfin/data/library.db", "/etc/jellyfin/system.xml", "/opt/frigate/config/config.yml", "/opt/frigate/config/frigate.db"} {
		if code, out, _ := run(t, c, "services", "cat", f); code != 0 || out == "" {
			t.Errorf("services: %s: %d %q", f, code, out)
		}
	}
	for _, unit := range []string{"jellyfin", "frigate"} {
		if code, out, _ := run(t, c, "services", "systemctl", "is-active", unit); code != 0 || out != "active\n" {
			t.Errorf("services: systemctl is-active %s: %d %q", unit, code, out)
		}
	}
	// A second start keeps what is there.
	if err := c.SetState(ctxT(t), "k3s", incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := incushost.New(incushost.Options{Dir: dir, Seed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	sock := filepath.Join(t.TempDir(), "s")
	served := make(chan error, 1)
	go func() { served <- s2.Serve(sock) }() // Serve blocks until Close
	c2, _ := incusapi.New(incusapi.Options{Socket: sock})
	deadline := time.Now().Add(30 * time.Second)
	for _, err := c2.Server(ctxT(t)); err != nil; _, err = c2.Server(ctxT(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("Serve never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if i := inst(t, c2, "k3s"); i.Status != "Stopped" {
		t.Fatalf("the stopped k3s after a restart of the lab: %s", i.Status)
	}
	if code, out, _ := run(t, c2, "matrix", "cat", "/root/systemctl.calls"); code != 0 || out != "stop matrix-synapse\n" {
		t.Fatalf("matrix after a restart of the lab: %d %q", code, out)
	}
	s2.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}

type fakeGuest struct {
	mu      sync.Mutex
	stopped int
}

func (g *fakeGuest) Stop() error {
	g.mu.Lock()
	g.stopped++
	g.mu.Unlock()
	return nil
}

func TestISOVMsBootThroughTheHook(t *testing.T) {
	var (
		mu    sync.Mutex
		specs []incushost.VMSpec
		guest = &fakeGuest{}
	)
	boot := func(_ context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		mu.Lock()
		defer mu.Unlock()
		specs = append(specs, spec)
		return guest, nil
	}
	dir := t.TempDir()
	s, c := lab(t, incushost.Options{Dir: dir, BootVM: boot})
	ctx := ctxT(t)
	if err := c.ImportStorageVolume(ctx, "default", "talos-iso", "iso", strings.NewReader("an ISO image")); err != nil {
		t.Fatal(err)
	}
	v, etag, err := c.StorageVolume(ctx, "default", "talos-iso")
	if err != nil || v.ContentType != "iso" || v.Config["size"] != "12" {
		t.Fatalf("the imported ISO: %+v %v", v, err)
	}
	put := v.StorageVolumePut
	put.Description = "marked"
	if err := c.UpdateStorageVolume(ctx, "default", "talos-iso", put, etag); err != nil {
		t.Fatal(err)
	}
	put.Config = map[string]string{"size": "1"}
	if err := c.UpdateStorageVolume(ctx, "default", "talos-iso", put, ""); err == nil {
		t.Fatal("an ISO volume's config was changed")
	}
	if err := c.CreateStorageVolume(ctx, "default", incusapi.StorageVolumesPost{Name: "bulk", ContentType: "block",
		StorageVolumePut: incusapi.StorageVolumePut{Config: map[string]string{"size": "150GiB"}}}); err != nil {
		t.Fatal(err)
	}
	share := t.TempDir()
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{
			"root": {"type": "disk", "path": "/", "pool": "default", "size": "20GiB"},
			"iso":  {"type": "disk", "pool": "default", "source": "talos-iso", "boot.priority": "10"},
			"bulk": {"type": "disk", "pool": "default", "source": "bulk"},
			"data": {"type": "disk", "source": share, "path": "/var/mnt/data"},
			"gpu":  {"type": "gpu", "gputype": "physical"},
			"eth0": {"type": "nic", "network": "labbr0"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStorageVolume(ctx, "default", "bulk"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("deleting a volume in use: %v", err)
	}
	if err := c.SetState(ctx, "talos", incusapi.InstanceStatePut{Action: "start"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(specs) != 1 {
		t.Fatalf("BootVM calls: %d", len(specs))
	}
	spec := specs[0]
	mu.Unlock()
	if !spec.GPU || spec.DataShare != share || spec.ISO == "" || !strings.HasPrefix(spec.IPv4, "127.0.1.") {
		t.Fatalf("the VM's spec: %+v", spec)
	}
	sizes := map[string]int64{}
	for _, d := range spec.Disks {
		sizes[d.Device] = d.Size
	}
	if sizes["root"] != 20<<30 || sizes["bulk"] != 150<<30 || sizes["iso"] != 12 {
		t.Fatalf("the disks' sizes: %v", sizes)
	}
	// the NIC's MAC is the one the daemon's way made at creation
	if inst, _, err := c.Instance(ctx, "talos"); err != nil || len(spec.NICs) != 1 ||
		spec.NICs[0] != (incushost.NIC{Device: "eth0", Name: "eth0", MAC: inst.Config["volatile.eth0.hwaddr"], Network: "labbr0"}) ||
		!strings.HasPrefix(spec.NICs[0].MAC, "10:66:6a:") {
		t.Fatalf("the VM's NICs: %+v (%v)", spec.NICs, err)
	}
	st, err := c.InstanceState(ctx, "talos")
	if err != nil || len(st.Network["eth0"].Addresses) == 0 || st.Network["eth0"].Addresses[0].Address != spec.IPv4 {
		t.Fatalf("the VM's eth0: %+v %v", st, err)
	}
	leases, err := c.NetworkLeases(ctx, "labbr0")
	found := false
	for _, l := range leases {
		found = found || l.Address == spec.IPv4
	}
	if err != nil || !found {
		t.Fatalf("the network's leases: %v %v", leases, err)
	}
	if err := c.SetState(ctx, "talos", incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatal(err)
	}
	if guest.stopped != 1 {
		t.Fatalf("the guest was stopped %d times", guest.stopped)
	}
	if err := c.DeleteInstance(ctx, "talos"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStorageVolume(ctx, "default", "bulk"); err != nil {
		t.Fatal(err)
	}
	// An ISO file of the host as the disk's source boots too.
	iso := filepath.Join(t.TempDir(), "metal-amd64.iso")
	if err := os.WriteFile(iso, []byte("an ISO file"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos2", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"}, Start: true,
		InstancePut: incusapi.InstancePut{Config: map[string]string{"limits.cpu": "6"},
			Devices: map[string]map[string]string{"install": {"type": "disk", "source": iso, "boot.priority": "10"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// A lab started again: the VM's guest died with the last one, and it
	// boots again, as the daemon restarts what ran when it stopped.
	s.Close()
	if guest.stopped != 2 {
		t.Fatalf("Close stopped %d guests in all, want 2", guest.stopped)
	}
	s2, err := incushost.New(incushost.Options{Dir: dir, BootVM: boot})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	sock := filepath.Join(t.TempDir(), "s")
	if err := s2.Listen(sock); err != nil {
		t.Fatal(err)
	}
	c2, _ := incusapi.New(incusapi.Options{Socket: sock})
	if i := inst(t, c2, "talos2"); i.Status != "Running" {
		t.Fatalf("a booted VM after a restart of the lab: %s", i.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(specs) != 3 || specs[1].ISO != iso || specs[1].GPU || specs[1].Config["limits.cpu"] != "6" {
		t.Fatalf("the second VM's spec: %+v", specs[len(specs)-1])
	}
	if specs[2].ISO != iso || specs[2].Name != "talos2" {
		t.Fatalf("the VM booted again with %+v", specs[2])
	}
}

func TestISOVMWithoutAHookFailsToStart(t *testing.T) {
	_, c := lab(t, incushost.Options{})
	ctx := ctxT(t)
	if err := c.ImportStorageVolume(ctx, "default", "iso", "iso", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "vm", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"}, Start: true,
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"iso": {"type": "disk", "pool": "default", "source": "iso"}}}})
	if err == nil || !strings.Contains(err.Error(), "no BootVM hook") {
		t.Fatalf("an ISO VM without a hook: %v", err)
	}
	if i := inst(t, c, "vm"); i.Status != "Stopped" {
		t.Fatalf("a VM whose start failed: %s", i.Status)
	}
}

func TestProfilesAddTheirDevices(t *testing.T) {
	dir := t.TempDir()
	_, c := lab(t, incushost.Options{Dir: dir})
	sock := filepath.Join(dir, "unix.socket")
	if code, env := raw(t, sock, "POST", "/1.0/profiles", `{"name":"net","devices":{"eth0":{"type":"nic","network":"labbr0"}}}`); code != http.StatusOK {
		t.Fatalf("POST /1.0/profiles: %d %v", code, env)
	}
	err := c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: "box", Type: "container", Start: true,
		Source:      incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Profiles: []string{"default", "net"}}})
	if err != nil {
		t.Fatal(err)
	}
	i := inst(t, c, "box")
	if i.ExpandedDevices["eth0"]["network"] != "labbr0" || i.ExpandedDevices["root"]["path"] != "/" || i.Config["volatile.eth0.hwaddr"] == "" {
		t.Fatalf("the instance of a profile: %+v", i)
	}
	st, err := c.InstanceState(ctxT(t), "box")
	if err != nil || st.Network["eth0"].Hwaddr != i.Config["volatile.eth0.hwaddr"] || len(st.Network["eth0"].Addresses) != 1 {
		t.Fatalf("eth0 of the profile: %+v %v", st, err)
	}
	if code, _ := raw(t, sock, "DELETE", "/1.0/profiles/net", ""); code != http.StatusBadRequest {
		t.Fatalf("deleting a profile in use: %d", code)
	}
	err = c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: "other", Type: "container",
		Source:      incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Profiles: []string{"nosuch"}}})
	if !incusapi.IsNotFound(err) {
		t.Fatalf("an unknown profile: %v", err)
	}
}

func TestTheLabAnswersWhileAVMBoots(t *testing.T) {
	release := make(chan struct{})
	booting := make(chan struct{}, 1)
	boot := func(ctx context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		booting <- struct{}{}
		select {
		case <-release:
			return &fakeGuest{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	_, c := lab(t, incushost.Options{BootVM: boot})
	iso := filepath.Join(t.TempDir(), "talos.iso")
	if err := os.WriteFile(iso, []byte("iso"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := c.CreateInstance(ctxT(t), incusapi.InstancesPost{Name: "vm", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"install": {"type": "disk", "source": iso}}}})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- c.SetState(ctxT(t), "vm", incusapi.InstanceStatePut{Action: "start"}) }()
	<-booting
	// While the hook works: reads answer, a second start and a delete are refused.
	if i := inst(t, c, "vm"); i.Status != "Stopped" {
		t.Fatalf("a booting VM: %s", i.Status)
	}
	if err := c.SetState(ctxT(t), "vm", incusapi.InstanceStatePut{Action: "start"}); err == nil || !strings.Contains(err.Error(), "already starting") {
		t.Fatalf("a second start during the boot: %v", err)
	}
	if err := c.DeleteInstance(ctxT(t), "vm"); err == nil {
		t.Fatal("a booting VM was deleted")
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if i := inst(t, c, "vm"); i.Status != "Running" {
		t.Fatalf("a booted VM: %s", i.Status)
	}
}
