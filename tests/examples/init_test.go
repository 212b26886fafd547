package examples

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/inventory/inventorytest"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/versions"
	"github.com/homelab-migrate/migrate/views"
)

// initRun runs `migrate init ARGS` with env and returns its exit code,
// stdout and stderr.
func initRun(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, migrate, append([]string{"init", "--no-color"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"INCUS_SOCKET=", "INCUS_DIR=", "MIGRATE_AGE_IDENTITY="}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("migrate init: %v", err)
	}
	return code, out.String(), errb.String()
}

// identity is a new age identity in a file of its own, outside any
// runbook.
func identity(t *testing.T) (string, *age.X25519Identity) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "age.key")
	if err := os.WriteFile(p, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, id
}

// hostWorld is what the API shows of a host, to compare before and after.
// With no prefix the host is the test's own (the lab): all of it counts.
// With a prefix it is the shared daemon, where other packages' tests create
// and attach instances and volumes at the same time: only what this test
// owns counts (the instances named with the prefix and their snapshots) and
// what they touch (the pools, networks and profiles they use, less the
// used_by lists others change).
func hostWorld(t *testing.T, c *incusapi.Client, prefix string) string {
	t.Helper()
	ctx := t.Context()
	insts, err := c.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shared := prefix != ""
	ours := func(name string) bool { return !shared || strings.HasPrefix(name, prefix) }
	var parts []any
	touched := map[string]bool{} // "profile/NAME", "network/NAME", "pool/NAME"
	for _, i := range insts {
		if !ours(i.Name) {
			continue
		}
		snaps, err := c.Snapshots(ctx, i.Name)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, i, snaps)
		for _, p := range i.Profiles {
			touched["profile/"+p] = true
		}
		for _, d := range i.ExpandedDevices {
			touched["network/"+d["network"]] = true
			touched["pool/"+d["pool"]] = true
		}
	}
	keep := func(kind, name string) bool { return !shared || touched[kind+"/"+name] }
	pools, err := c.StoragePoolsAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if !keep("pool", p.Name) {
			continue
		}
		vols, err := c.StorageVolumesAll(ctx, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if shared {
			p.UsedBy = nil
			vols = slices.DeleteFunc(vols, func(v incusapi.StorageVolume) bool { return !ours(v.Name) })
		}
		parts = append(parts, p, vols)
	}
	nets, err := c.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if keep("network", n.Name) {
			if shared {
				n.UsedBy = nil
			}
			parts = append(parts, n)
		}
	}
	profs, err := c.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range profs {
		if keep("profile", p.Name) {
			parts = append(parts, p)
		}
	}
	b, _ := json.MarshalIndent(parts, "", " ")
	return string(b)
}

// TestInitFromTheLab: migrate init against the lab's IncusOS host, as
// its user would (the lab's environment, an identity of their own): the
// report names the services VM's missing GPU, the autostart, the pools and
// networks; the runbook it writes validates with no diagnostics and plans
// against the lab; the host is as it was.
func TestInitFromTheLab(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	opts, err := incusapi.RemoteOptions(h.ClientConfig(), home.Remote)
	if err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := hostWorld(t, c, "")
	key, id := identity(t)
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+key)

	dir := filepath.Join(t.TempDir(), "home-move")
	code, out, stderr := initRun(t, env, dir)
	if code != 0 {
		t.Fatalf("migrate init: exit %d\n%s\n%s", code, out, stderr)
	}
	flat := strings.Join(strings.Fields(out), " ") // the report wraps lines
	for _, want := range []string{
		"services has no gpu device, only QEMU's emulated display: its video decoding ran on the CPU",
		"Jellyfin is set for hardware decoding: vaapi (/etc/jellyfin/encoding.xml)",
		"pool local", "pool tank", "volumes data", "network enp5s0 bridge, the host's own", "network incusbr0 bridge, managed, NAT",
		"Wrote " + dir,
		"make your router's DHCP reserve node_address for 10:66:6a:",
		// Each app as installed: kind, version, database, config files.
		"app Jellyfin", "database SQLite /var/lib/jellyfin/data/jellyfin.db; config /etc/jellyfin/encoding.xml",
		"app Synapse", "config /etc/matrix-synapse/homeserver.yaml",
		"app Frigate", "database SQLite /opt/frigate/config/frigate.db",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	site, err := os.ReadFile(filepath.Join(dir, "site.auto.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`storage_pool = "local"`, `data_pool = "tank"`, `data_volume = "data"`, `lan_bridge = "enp5s0"`,
		`services_vm = "services"`, `matrix_vm = "matrix"`, `k3s_vm = "k3s"`, `incus_remote = "lab"`, "TODO: node_address",
		`talos_version = "v1.13.3"`} {
		if !strings.Contains(strings.Join(strings.Fields(string(site)), " "), want) {
			t.Errorf("site.auto.hcl lacks %q:\n%s", want, site)
		}
	}
	// The images are never older than what the old VMs run.
	checkImagesNotOlder(t, string(site))
	if keys := clearKeys(t, dir); len(keys) > 0 {
		t.Errorf("keys in clear in the runbook: %v", keys)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".age-recipients")); !strings.Contains(string(b), id.Recipient().String()) {
		t.Errorf(".age-recipients does not name the user's identity:\n%s", b)
	}

	// The runbook validates with no diagnostics, and plans against the lab.
	if v := run(t, dir, env, "validate"); strings.TrimSpace(v) != fmt.Sprintf("The runbook is valid: 6 phases, %d steps.", homelabSteps(t)) {
		t.Errorf("validate: %s", v)
	}
	plan := run(t, dir, env, "plan")
	for _, want := range []string{`stop instance "services" (running -> stopped)`, `stop instance "matrix" (running -> stopped)`,
		"group.node.incus_instance.vm", "systemctl stop jellyfin", "node talos-home as its machine config makes it",
		// the written runbook's VMs install from their config drive
		`install: first config through the Incus host's API (first_install = "nocloud"): nothing is sent over the LAN`} {
		if !strings.Contains(plan, want) {
			t.Errorf("the plan lacks %q:\n%s", want, tail(plan, 4000))
		}
	}

	// --json: the same findings, for a program.
	code, js, stderr := initRun(t, env, "--json", filepath.Join(filepath.Dir(dir), "again"))
	if code != 0 {
		t.Fatalf("migrate init --json: exit %d\n%s", code, stderr)
	}
	var rep views.InitReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("the JSON report: %v\n%s", err, js)
	}
	codes := map[string][]string{}
	for _, f := range rep.Findings {
		codes[f.Code] = append(codes[f.Code], f.Subject)
	}
	if got := fmt.Sprint(codes[inventory.CodeVMNoGPU]); got != "[instance services]" {
		t.Errorf("vm-no-gpu findings: %s (all: %v)", got, codes)
	}
	if rep.Site.StoragePool != "local" || rep.Site.LANBridge != "enp5s0" || len(rep.Files) < 20 {
		t.Errorf("the JSON site or files: %+v, %d files", rep.Site, len(rep.Files))
	}

	if after := hostWorld(t, c, ""); after != before {
		t.Errorf("migrate init changed the host:\nbefore %s\nafter %s", before, after)
	}

	// What its user does next: the router reserves the addresses for the
	// new MACs site.auto.hcl chose (its TODO lines), and the rehearsal
	// runs as init wrote it: the throwaway Talos VM boots with the fresh
	// secrets, the host's names, its iGPU and data volume, passes its
	// checks and is deleted; the old VMs still run.
	again := filepath.Join(filepath.Dir(dir), "again")
	if err := h.Reserve(rep.Site.NodeMAC, h.NodeAddress()); err != nil {
		t.Fatal(err)
	}
	if err := h.Reserve(rep.Site.RehearsalMAC, h.RehearsalAddress()); err != nil {
		t.Fatal(err)
	}
	rehearsal := strings.Join(strings.Fields(run(t, again, env, "run", "--phase", "rehearsal", "--auto-approve")), " ")
	for _, want := range []string{"Phase rehearsal complete", "/var/mnt/data/.migrate/rehearsal read through the API"} {
		if !strings.Contains(rehearsal, want) {
			t.Errorf("the rehearsal of the written runbook lacks %q:\n%s", want, rehearsal)
		}
	}
	if h.VM("rehearsal") != nil {
		t.Error("the throwaway VM is still there after the rehearsal")
	}
	for _, vm := range []string{"services", "matrix"} {
		if i, _, err := c.Instance(t.Context(), vm); err != nil || i.Status != "Running" {
			t.Errorf("the old VM %s after the rehearsal: %+v %v", vm, i, err)
		}
	}
}

// TestInitFromTheDebianLab: init against old VMs as Debian installs the
// apps, each newer than the example's images and Synapse on PostgreSQL:
// the report prints each app's kind, version, database engine and config
// files; site.auto.hcl runs images of those releases and, the host being
// IncusOS after its direct-attach tutorial, its physical LAN network,
// which the plan takes; and the written runbook, with Jellyfin's image
// edited back to the example's older one, fails at plan naming both
// versions.
func TestInitFromTheDebianLab(t *testing.T) {
	t.Parallel()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: 35, LANPhysical: "enp5s0",
		OldHost: &incushost.OldHost{SynapseDB: "psycopg2", JellyfinVersion: "10.11.2", SynapseVersion: "1.130.0", FrigateVersion: "0.15.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	key, _ := identity(t)
	env := append(h.Env(), "MIGRATE_AGE_IDENTITY="+key)
	dir := filepath.Join(t.TempDir(), "home-move")
	code, out, stderr := initRun(t, env, dir)
	if code != 0 {
		t.Fatalf("migrate init: exit %d\n%s\n%s", code, out, stderr)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"app Jellyfin 10.11.2+deb12 (Debian package jellyfin-server); database SQLite /var/lib/jellyfin/data/jellyfin.db; config /etc/default/jellyfin",
		"app Synapse 1.130.0+bookworm1 (Debian package matrix-synapse-py3); database PostgreSQL synapse on localhost; config /etc/matrix-synapse/homeserver.yaml /etc/matrix-synapse/conf.d/",
		"app Frigate 0.15.1 (Compose project frigate); database SQLite /opt/frigate/config/frigate.db; config /opt/frigate/docker-compose.yml /opt/frigate/config/config.yml",
		"app Samba", "users ana ben",
		"[synapse-postgres]", "[image-newer]",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	sitePath := filepath.Join(dir, "site.auto.hcl")
	site, err := os.ReadFile(sitePath)
	if err != nil {
		t.Fatal(err)
	}
	checkImagesNotOlder(t, string(site))
	for _, want := range []string{`jellyfin_image = "jellyfin/jellyfin:10.11.2"`, `synapse_image = "matrixdotorg/synapse:v1.130.0"`,
		`frigate_image = "ghcr.io/blakeblackshear/frigate:0.15.1"`, `synapse_database = "psycopg2"`, `frigate_install = "compose"`} {
		if !strings.Contains(strings.Join(strings.Fields(string(site)), " "), want) {
			t.Errorf("site.auto.hcl lacks %q:\n%s", want, site)
		}
	}

	// IncusOS's physical LAN network: the NICs name it, and the plan
	// takes it.
	if !strings.Contains(strings.Join(strings.Fields(string(site)), " "), `lan_network = "enp5s0"`) {
		t.Errorf("site.auto.hcl does not take the physical LAN network:\n%s", site)
	}
	plan := run(t, dir, env, "plan")
	if strings.Contains(plan, "no-lan-bridge") || !strings.Contains(plan, "group.node.incus_instance.vm") {
		t.Errorf("the plan on the physical LAN network:\n%s", tail(plan, 3000))
	}

	// Jellyfin's image edited back to the example's: the plan refuses it.
	older := strings.Replace(string(site), `"jellyfin/jellyfin:10.11.2"`, `"jellyfin/jellyfin:10.10.3"`, 1)
	if err := os.WriteFile(sitePath, []byte(older), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(migrate, "plan", "--runbook", dir, "--no-color")
	cmd.Env = append(os.Environ(), env...)
	refused, err := cmd.CombinedOutput()
	said := strings.Join(strings.Fields(string(refused)), " ")
	if err == nil || !strings.Contains(said, "jellyfin/jellyfin:10.10.3 is older than 10.11.2+deb12, the version the old VM runs") || !strings.Contains(said, "on main.hcl line") {
		t.Errorf("the plan of a downgraded Jellyfin: %v\n%s", err, refused)
	}
}

// TestInitBadInput: an unreachable host, a certificate that is not the
// pinned one, a client the host does not trust, a host with no
// instances and a directory that is not empty: each a clear error, and
// nothing written.
func TestInitBadInput(t *testing.T) {
	t.Parallel()
	key, _ := identity(t)
	// A host with no instances (no seed), over HTTPS.
	s, err := incushost.New(incushost.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.ServeHTTPS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "incus")
	if err := s.WriteClientConfig(conf, "empty", "https://"+addr.String()); err != nil {
		t.Fatal(err)
	}
	// The same remote with a client certificate the host never trusted,
	// and one pinning another server's certificate.
	untrusted := copyDir(t, conf)
	crt, k := selfSigned(t)
	os.WriteFile(filepath.Join(untrusted, "client.crt"), crt, 0o644)
	os.WriteFile(filepath.Join(untrusted, "client.key"), k, 0o600)
	otherServer := copyDir(t, conf)
	os.WriteFile(filepath.Join(otherServer, "servercerts", "empty.crt"), crt, 0o644)

	notEmpty := t.TempDir()
	os.WriteFile(filepath.Join(notEmpty, "notes.txt"), []byte("mine"), 0o644)

	for _, tc := range []struct {
		name string
		env  []string
		args []string
		dir  string
		want string
	}{
		{"unreachable", nil, []string{"--address", "https://127.0.0.1:1"}, "", "cannot reach the daemon at https://127.0.0.1:1"},
		{"server certificate", []string{"INCUS_CONF=" + otherServer}, nil, "", "but the pinned certificate is SHA-256"},
		{"untrusted client", []string{"INCUS_CONF=" + untrusted}, nil, "", "does not trust this client certificate"},
		{"no instances", []string{"INCUS_CONF=" + conf}, nil, "", "the host has no instances: there is nothing to migrate"},
		{"not empty", []string{"INCUS_CONF=" + conf}, nil, notEmpty, "is not empty (it has notes.txt)"},
		{"talos version", []string{"INCUS_CONF=" + conf}, []string{"--talos-version", "v1.12.0"}, "", "the runbook runs a Talos 1.13, 1.14 or 1.15 release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "runbook")
			}
			code, out, stderr := initRun(t, append(tc.env, "MIGRATE_AGE_IDENTITY="+key), append(tc.args, dir)...)
			if code != 1 || !strings.Contains(strings.Join(strings.Fields(stderr), " "), tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 saying %q", code, out, stderr, tc.want)
			}
			if tc.dir == "" {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("%s was made: %v", dir, err)
				}
			} else if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("something was written into %s: %v", dir, entries)
			}
		})
	}
	// Without an identity or a recipient, nothing is read or written.
	code, _, stderr := initRun(t, []string{"INCUS_CONF=" + conf}, filepath.Join(t.TempDir(), "runbook"))
	if code != 1 || !strings.Contains(stderr, "no age recipient to seal the new secrets to") {
		t.Errorf("without a recipient: exit %d, %s", code, stderr)
	}
}

// TestInitRealDaemon: against the real Incus daemon, whose containers
// stand in for the old VMs, migrate init reads and reports without an
// error, and the daemon is as it was. The containers are in a project of
// the test's own (--project), as a host's old VMs may be: the other tests'
// instances on the same daemon, some with Synapse's files, stay out of
// the move it reads.
func TestInitRealDaemon(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("init-%d-", time.Now().UnixNano()%100000)
	project := strings.TrimSuffix(prefix, "-")
	// The default project's images, profiles and volumes, as a project
	// made with incus project create -c features.*=false has.
	incusOut(t, "project", "create", project, "-c", "features.images=false", "-c", "features.profiles=false", "-c", "features.storage.volumes=false")
	t.Cleanup(func() { exec.Command("incus", "project", "delete", project).Run() })
	c, err := incusapi.New(incusapi.Options{Project: project})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A secret in an instance's config stays on the host.
	secret := fmt.Sprintf("canary-%x", time.Now().UnixNano())
	for _, name := range []string{"services", "matrix"} {
		incusOut(t, "launch", image(), prefix+name, "--project", project, "-c", "boot.autostart=true", "-c", "environment.DB_PASSWORD="+secret)
		t.Cleanup(func() { exec.Command("incus", "delete", "--force", "--project", project, prefix+name).Run() })
	}
	incusOut(t, "exec", "--project", project, prefix+"matrix", "--", "mkdir", "-p", "/etc/matrix-synapse")
	hs := filepath.Join(t.TempDir(), "homeserver.yaml")
	os.WriteFile(hs, []byte("server_name: \"chat.example.net\"\npublic_baseurl: \"https://chat.example.net/\"\n"), 0o644)
	incusOut(t, "file", "push", "--project", project, hs, prefix+"matrix/etc/matrix-synapse/homeserver.yaml")
	before := hostWorld(t, c, prefix)

	key, _ := identity(t)
	dir := filepath.Join(t.TempDir(), "runbook")
	code, out, stderr := initRun(t, []string{"INCUS_CONF=" + t.TempDir(), "MIGRATE_AGE_IDENTITY=" + key}, "--json", "--project", project, dir)
	if code != 0 {
		t.Fatalf("migrate init against the daemon: exit %d\n%s\n%s", code, out, stderr)
	}
	var rep views.InitReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the JSON report: %v\n%s", err, out)
	}
	if strings.Contains(out+stderr, secret) || len(grepTree(t, dir, secret)) > 0 {
		t.Errorf("an instance's environment secret left the host")
	}
	if len(rep.Host.Instances) != 2 {
		t.Errorf("the instances of project %s: %d, want its 2", project, len(rep.Host.Instances))
	}
	m := rep.Host.Instance(prefix + "matrix")
	if m == nil || m.Type != "container" || !m.Autostart || len(m.Apps) != 1 || m.Apps[0].Detail["server_name"] != "chat.example.net" {
		t.Errorf("the matrix container as read: %+v", m)
	}
	if rep.Site.MatrixVM != prefix+"matrix" || rep.Site.MatrixDomain != "chat.example.net" || rep.Site.StoragePool == "" {
		t.Errorf("the site: %+v", rep.Site)
	}
	if len(rep.Host.Pools) == 0 || rep.Host.Pools[0].Total == 0 || rep.Host.CPUs == 0 {
		t.Errorf("the pools or the hardware were not read: %+v", rep.Host)
	}
	if after := hostWorld(t, c, prefix); after != before {
		t.Errorf("migrate init changed the daemon:\nbefore %s\nafter %s", before, after)
	}
	// The daemon has no k3s playground: the runbook leaves its step out,
	// and validates with no diagnostics.
	main, _ := os.ReadFile(filepath.Join(dir, "main.hcl"))
	if !strings.Contains(string(main), "# migrate init left out step incus_instance_state.old_k3s") {
		t.Errorf("main.hcl keeps the step of a k3s VM the host lacks")
	}
	// The run acts in the project the read looked in.
	if want := fmt.Sprintf("project = %q # where migrate init read the old VMs", project); !strings.Contains(strings.Join(strings.Fields(string(main)), " "), want) {
		t.Errorf("main.hcl's incus provider lacks %q", want)
	}
	if v := run(t, dir, []string{"MIGRATE_AGE_IDENTITY=" + key}, "validate"); strings.TrimSpace(v) != fmt.Sprintf("The runbook is valid: 6 phases, %d steps.", homelabSteps(t)-1) {
		t.Errorf("validate: %s", v)
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// selfSigned is a client certificate and key no host trusts.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "stranger"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// grepTree lists the files under dir that contain s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(s)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

// checkImagesNotOlder: each *_image of site.auto.hcl is of its
// *_version or newer.
func checkImagesNotOlder(t *testing.T, site string) {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(site), "site.auto.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("site.auto.hcl: %v", diags)
	}
	attrs, _ := f.Body.JustAttributes()
	for _, app := range []string{"jellyfin", "synapse", "frigate"} {
		v, ok := attrs[app+"_version"]
		if !ok {
			continue // not read: nothing to hold the image to
		}
		version, _ := v.Expr.Value(nil)
		image, _ := attrs[app+"_image"].Expr.Value(nil)
		if versions.Older(versions.Tag(image.AsString()), version.AsString()) {
			t.Errorf("site.auto.hcl: %s_image %s is older than %s_version %s", app, image.AsString(), app, version.AsString())
		}
	}
}

// homelabSteps is how many steps examples/homelab has, as the runbook
// loader counts them (a for_each step once per key; checks aside): what
// validate says of a runbook migrate init wrote from it.
func homelabSteps(t *testing.T) int {
	t.Helper()
	n := 0
	for _, ph := range inventorytest.Template(t).Runbook.Phases {
		n += len(ph.Steps)
	}
	return n
}
