package home

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestHome: a lab home server holds the three old VMs, running, behind
// its HTTPS API only (no unix socket), with IncusOS's pools and networks;
// its env points the incus CLI's configuration at it; the federation
// endpoint answers and fails on demand; a VM booted from the ISO with a
// NIC on the LAN is a Talos node at the address the router reserves for
// its MAC; Close leaves no process and no lab.env.
func TestHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var log strings.Builder
	// A block of its own: a demo or another lab on the machine may run.
	block := 100 + os.Getpid()%150
	h, err := Start(ctx, Options{Dir: dir, Log: &log, AddressBlock: block, Env: []string{"MIGRATE_AGE_IDENTITY=/demo/identity.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			h.Close()
		}
	}()

	// The incus provider's client finds it through INCUS_CONF alone.
	env := envMap(h.Env())
	t.Setenv("INCUS_CONF", env["INCUS_CONF"])
	opts, err := incusapi.RemoteOptions("", "")
	if err != nil {
		t.Fatal(err)
	}
	if opts.URL != "https://"+h.HTTPSAddr() || opts.Socket != "" {
		t.Fatalf("the lab's remote: %+v, want HTTPS to %s", opts, h.HTTPSAddr())
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "incus", "*.socket")); len(matches) > 0 {
		t.Errorf("the IncusOS lab serves a unix socket: %v", matches)
	}
	pools, err := c.StoragePools(ctx)
	if err != nil || !slices.Equal(pools, []string{StoragePool, DataPool}) {
		t.Errorf("pools %v, %v; want local and tank", pools, err)
	}
	if vols, err := c.StorageVolumes(ctx, DataPool); err != nil || !slices.Contains(vols, DataVolume) {
		t.Errorf("the volumes of %s: %v, %v; want %s", DataPool, vols, err, DataVolume)
	}
	nets, err := c.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	managed := map[string]bool{}
	for _, n := range nets {
		managed[n.Name] = n.Managed
	}
	if m, ok := managed["incusbr0"]; !ok || !m {
		t.Errorf("networks %v: want the managed incusbr0", managed)
	}
	if m, ok := managed[h.LANBridge()]; !ok || m {
		t.Errorf("networks %v: want the host's own bridge %s, unmanaged", managed, h.LANBridge())
	}
	defer c.Close()
	list, err := c.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var running []string
	for _, in := range list {
		if in.Status == "Running" {
			running = append(running, in.Name)
		}
	}
	slices.Sort(running)
	if !slices.Equal(running, []string{"k3s", "matrix", "services"}) {
		t.Errorf("running instances %v, want the three old VMs", running)
	}

	want := map[string]string{"INCUS_CONF": filepath.Join(dir, "incus-client"), "MIGRATE_VAR_incus_remote": Remote,
		"MIGRATE_VAR_node_address": fmt.Sprintf("127.%d.200.50", block), "MIGRATE_VAR_rehearsal_address": fmt.Sprintf("127.%d.200.51", block),
		"MIGRATE_VAR_image_factory": h.Factory().URL(), "MIGRATE_VAR_talos_iso_dir": filepath.Join(dir, "images"),
		"MIGRATE_AGE_IDENTITY": "/demo/identity.txt"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("Env %s=%q, want %q", k, env[k], v)
		}
	}
	if code, body := get(t, env["MIGRATE_VAR_image_factory"]+"/versions"); code != 200 || !strings.Contains(body, "v1.13.3") {
		t.Errorf("the Image Factory's versions: %d %s", code, body)
	}
	iso, err := h.WriteISO("v1.13.3", "siderolabs/i915")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, labenv.File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lab.env: %v (want mode 0600)", err)
	}
	if got, err := labenv.Read(dir); err != nil || !slices.Equal(got, h.Env()) {
		t.Errorf("labenv.Read = %v, %v; want %v", got, err, h.Env())
	}

	// The federation endpoint: TLS only, trusted with the lab's CA alone.
	fed := env["MIGRATE_VAR_matrix_url"] + FederationPath
	if !strings.HasPrefix(fed, "https://") || env["MIGRATE_VAR_matrix_ca"] != h.MatrixCA() {
		t.Errorf("matrix_url %q, matrix_ca %q", env["MIGRATE_VAR_matrix_url"], env["MIGRATE_VAR_matrix_ca"])
	}
	pool := x509.NewCertPool()
	if caPEM, err := os.ReadFile(env["MIGRATE_VAR_matrix_ca"]); err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the lab's Matrix CA file holds no certificate")
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	// Before the ingress: the router's forward goes nowhere.
	for _, p := range []string{FederationPath, WellKnownPath, ClientVersionsPath} {
		if code, body := getWith(t, trusting, env["MIGRATE_VAR_matrix_url"]+p); code != http.StatusBadGateway || !strings.Contains(body, h.NodeAddress()+":30443") {
			t.Errorf("%s without the node's ingress: %d %s, want 502 naming the forward's target", p, code, body)
		}
	}
	var unknown x509.UnknownAuthorityError
	if _, err := http.Get(fed); !errors.As(err, &unknown) {
		t.Errorf("the federation endpoint without the lab's CA: %v, want an unknown authority", err)
	}
	// With it: what the ingress answers, asked for the homeserver's name.
	ingress := nodeIngress(t, h, fmt.Sprintf(`{"versions":["v1.11"],"from":"the node's ingress %s"}`, h.NodeAddress()))
	if code, body := getWith(t, trusting, env["MIGRATE_VAR_matrix_url"]+ClientVersionsPath); code != 200 || !strings.Contains(body, "from\":\"the node's ingress") {
		t.Errorf("the client versions through the forward: %d %s", code, body)
	}
	h.FailFederation(true)
	if code, _ := getWith(t, trusting, fed); code != 503 {
		t.Errorf("federation with the failure on: %d, want 503", code)
	}
	h.FailFederation(false)
	if code, body := getWith(t, trusting, fed); code != 200 || !strings.Contains(body, "the node's ingress") {
		t.Errorf("federation with the failure off: %d %s, want the ingress's 200", code, body)
	}
	ingress.Close()
	// An ingress serving another certificate (ingress-nginx's fake one,
	// without the Ingress's tls) is refused, as by a client.
	ingress = nodeIngress(t, h, "")
	if code, body := getWith(t, trusting, fed); code != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("an ingress with a certificate the CA did not sign: %d %s, want 502", code, body)
	}
	ingress.Close()

	// A VM with the Talos ISO boots as a lab Talos node at the address
	// the router reserves for its NIC's MAC, which Incus does not report.
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{
			"root":    {"type": "disk", "pool": StoragePool, "path": "/", "size": "16GiB"},
			"data":    {"type": "disk", "pool": DataPool, "source": DataVolume, "path": "/var/mnt/data"},
			"lan":     {"type": "nic", "nictype": "bridged", "parent": h.LANBridge(), "hwaddr": NodeMAC},
			"igpu":    {"type": "gpu", "gputype": "physical", "pci": "0000:00:02.0"},
			"install": {"type": "disk", "source": iso, "boot.priority": "10"},
		}}})
	if err == nil {
		err = c.SetState(ctx, "talos", incusapi.InstanceStatePut{Action: "start"})
	}
	if err != nil {
		t.Fatal(err)
	}
	vm := h.VM("talos")
	if vm == nil {
		t.Fatalf("no Talos VM after the start; log:\n%s", log.String())
	}
	st, err := c.InstanceState(ctx, "talos")
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range st.Network {
		if name != "lo" && len(n.Addresses) > 0 {
			t.Errorf("Incus reports an address of the VM on the LAN: %s %+v", name, n.Addresses)
		}
	}
	addr := h.NodeAddress()
	spec := vm.Spec()
	if spec.Addr != addr || spec.DataDir != h.DataDir() || !spec.GPU {
		t.Errorf("the VM's spec %+v, want the address %q, the data volume's dir and the gpu", spec, addr)
	}
	if !slices.Equal(spec.Disks, []talosnode.Disk{{Name: "/dev/sda", Size: strconv.Itoa(16 << 30), Model: "QEMU HARDDISK", Serial: "incus_root", Transport: "scsi"},
		{Name: "/dev/sr0", Size: strconv.Itoa(factory.ISOSize), Model: "QEMU CD-ROM", Serial: "incus_install", Transport: "scsi", Readonly: true, CDROM: true}}) {
		t.Errorf("the VM's disks: %+v", spec.Disks)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "50000"), 10*time.Second)
	if err != nil {
		t.Fatalf("the node's machine API: %v", err)
	}
	conn.Close()

	// Its disks are the instance's: deleted with it, so that a new VM of
	// the same name boots from an empty disk, as on Incus.
	if !strings.HasPrefix(spec.Dir, filepath.Join(dir, "incus")+"/") {
		t.Errorf("the VM keeps its node in %s, outside its instance", spec.Dir)
	}
	if _, err := os.Stat(spec.Dir); err != nil {
		t.Fatal(err)
	}
	if err := c.SetState(ctx, "talos", incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteInstance(ctx, "talos"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spec.Dir); !os.IsNotExist(err) {
		t.Errorf("the VM's node after the instance's deletion: %v", err)
	}

	// A VM whose ISO holds no Talos image starts, and its firmware finds
	// nothing to boot: no node, the console says so.
	blank := filepath.Join(h.ImagesDir(), "blank.iso")
	if err := os.WriteFile(blank, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "blank", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{
			"root":    {"type": "disk", "pool": StoragePool, "path": "/", "size": "16GiB"},
			"install": {"type": "disk", "source": blank, "boot.priority": "10"},
		}}})
	if err == nil {
		err = c.SetState(ctx, "blank", incusapi.InstanceStatePut{Action: "start"})
	}
	if err != nil {
		t.Fatalf("starting a VM with an empty ISO: %v", err)
	}
	if h.VM("blank") != nil || !strings.Contains(log.String(), "blank console: talosvm: VM \"blank\": BdsDxe: No bootable option or device was found") {
		t.Errorf("a VM of an empty ISO booted a node, or its console says nothing; log:\n%s", log.String())
	}

	closed = true
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left after Close: %v", kids)
	}
	if _, err := os.Stat(filepath.Join(dir, labenv.File)); !os.IsNotExist(err) {
		t.Errorf("lab.env after Close: %v", err)
	}
	if _, err := labenv.Read(dir); err == nil || !strings.Contains(err.Error(), "no lab runs in "+dir) {
		t.Errorf("labenv.Read after Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "50000"), time.Second); err == nil {
		c.Close()
		t.Error("the node still answers after Close")
	}
}

// TestDisks: what a node sees of its VM's disk devices.
func TestDisks(t *testing.T) {
	got := disks([]incushost.Disk{
		{Device: "bulk", Source: "bulk", Pool: "default", Size: 150 << 30},
		{Device: "data", Source: "/tank/data", Path: "/var/mnt/data", Shared: true},
		{Device: "install", ISO: true, Size: 100 << 20},
		{Device: "root", Path: "/", Pool: "default"},
	})
	want := []talosnode.Disk{
		{Name: "/dev/sda", Size: "10GiB", Model: "QEMU HARDDISK", Serial: "incus_root", Transport: "scsi"},
		{Name: "/dev/sdb", Size: strconv.Itoa(150 << 30), Model: "QEMU HARDDISK", Serial: "incus_bulk", Transport: "scsi"},
		{Name: "/dev/sr0", Size: strconv.Itoa(100 << 20), Model: "QEMU CD-ROM", Serial: "incus_install", Transport: "scsi", Readonly: true, CDROM: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("disks:\n%+v\nwant\n%+v", got, want)
	}
}

// TestStartRefusesBadOptions: Options.Dir is required, Options.Env lines
// are KEY=VALUE.
func TestStartRefusesBadOptions(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil {
		t.Error("Start without a Dir succeeded")
	}
	if _, err := Start(context.Background(), Options{Dir: t.TempDir(), Env: []string{"NOEQUALS"}}); err == nil || !strings.Contains(err.Error(), "NOEQUALS") {
		t.Errorf("Start with a bad Env line: %v", err)
	}
}

func getWith(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getWith(t, http.DefaultClient, url)
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// children are the test process's child processes still alive (zombies
// count: nobody waited for them).
func children(t *testing.T) []string {
	t.Helper()
	var out []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == me {
			out = append(out, s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return out
}

// nodeIngress stands in for the Talos node's ingress on its HTTPS
// NodePort: with the lab's Matrix certificate, answering body to a
// request for MatrixDomain (SNI and Host), 404 to others; an empty body:
// a self-signed certificate of its own.
func nodeIngress(t *testing.T, h *Home, body string) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(h.NodeAddress(), strconv.Itoa(IngressHTTPSPort)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != MatrixDomain || r.TLS.ServerName != MatrixDomain {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, body)
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the forward's idle connections, closed with it
	if body != "" {
		cert, err := tls.LoadX509KeyPair(h.MatrixTLSCert(), h.MatrixTLSKey())
		if err != nil {
			t.Fatal(err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
