package inventory_test

import (
	"encoding/json"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// readDebianLab reads a lab whose old VMs are Debian 12 hosts (the
// variant old), as migrate init reads a host: its apps' facts by name,
// the site chosen and every finding.
func readDebianLab(t *testing.T, old incushost.OldHost, block int) (map[string]*inventory.AppFacts, inventory.Site, []inventory.Finding, *incusapi.Client) {
	t.Helper()
	h, err := home.Start(t.Context(), home.Options{Dir: filepath.Join(t.TempDir(), "lab"), AddressBlock: block, OldHost: &old})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	opts, err := incusapi.RemoteOptions(h.ClientConfig(), home.Remote)
	if err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	before, err := home.ReadEvents(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	host, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the host read in %s", time.Since(start).Round(time.Millisecond))
	ev, _ := home.ReadEvents(h.Dir())
	checkReadOnlyCommands(t, ev[len(before):])
	facts := map[string]*inventory.AppFacts{}
	for _, i := range host.Instances {
		for _, a := range i.Apps {
			facts[a.Name] = a.Facts
		}
	}
	site, guesses, err := inventory.Choose(tmpl(t), host, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return facts, site, append(guesses, inventory.Check(host, site)...), c
}

// TestReadDebianOldVMs: the lab's old VMs as Debian installs the apps
// (real dpkg records, dash, python3, pdbedit and SQLite files; no
// sqlite3): init reads each app's kind, version, config files with
// conf.d, database, paths, users and decoding, and says what the move
// does about each.
func TestReadDebianOldVMs(t *testing.T) {
	t.Parallel()
	facts, site, fs, _ := readDebianLab(t, incushost.OldHost{}, 33)
	syn, jf, fr, sm := facts["Synapse"], facts["Jellyfin"], facts["Frigate"], facts["Samba"]
	if syn == nil || jf == nil || fr == nil || sm == nil {
		t.Fatalf("the apps' facts: %+v", facts)
	}
	if syn.Kind != inventory.KindDebian || syn.Version != "1.120.2+bookworm1" || syn.Database == nil || syn.Database.Engine != inventory.EngineSQLite ||
		!slices.Contains(syn.ConfigFiles, "/etc/matrix-synapse/conf.d/server_name.yaml") || slices.Contains(syn.Tools, "sqlite3") ||
		!slices.Contains(syn.Tools, "/opt/venvs/matrix-synapse/bin/python") {
		t.Errorf("Synapse: %+v %+v", syn, syn.Database)
	}
	if jf.Kind != inventory.KindDebian || jf.Version != "10.10.7+deb12" || !slices.Equal(jf.Users, []string{"ana", "ben"}) ||
		!slices.Equal(jf.LibraryPaths, []string{"/var/mnt/data/media/movies"}) || jf.HWAccel != "" {
		t.Errorf("Jellyfin: %+v", jf)
	}
	if fr.Kind != inventory.KindCompose || fr.Package != "frigate" || fr.Version != "0.14.1" || fr.Database == nil || fr.Database.Path != "/opt/frigate/config/frigate.db" {
		t.Errorf("Frigate: %+v", fr)
	}
	if sm.Kind != inventory.KindDebian || !slices.Equal(sm.Users, []string{"ana", "ben"}) || !slices.Contains(sm.LibraryPaths, "/var/mnt/data/photos") {
		t.Errorf("Samba: %+v", sm)
	}
	if site.MatrixDomain != "matrix.example.org" || site.Apps.Jellyfin.Version != "10.10.7+deb12" || site.Apps.Jellyfin.Image != "jellyfin/jellyfin:10.10.7" ||
		site.Apps.Synapse.Image != "matrixdotorg/synapse:v1.120.2" || site.Apps.FrigateInstall != "compose" || site.Apps.SynapseDatabase != "sqlite3" {
		t.Errorf("the site: %+v %+v", site.MatrixDomain, site.Apps)
	}
	for _, code := range []string{inventory.CodeNoSQLite3, inventory.CodeConfD, inventory.CodeCompose} {
		if len(findingsOf(fs, code)) != 1 {
			t.Errorf("no %s finding: %+v", code, fs)
		}
	}
	if got := findingsOf(fs, inventory.CodeHWAccelOff); len(got) != 2 {
		t.Errorf("hardware decoding off in Jellyfin and Frigate: %+v", got)
	}
	if got := findingsOf(fs, inventory.CodeAppUnread); len(got) != 0 {
		t.Errorf("facts not read from the Debian VMs: %+v", got)
	}
}

// TestReadDebianVariants: Synapse on PostgreSQL, hardware decoding on,
// and every app newer than the example's image: the site runs images of
// those releases, never the example's older ones.
func TestReadDebianVariants(t *testing.T) {
	t.Parallel()
	facts, site, fs, c := readDebianLab(t, incushost.OldHost{SynapseDB: "psycopg2", HWAccel: true, JellyfinVersion: "10.11.2", FrigateVersion: "0.15.1", SynapseVersion: "1.130.0"}, 34)
	if d := facts["Synapse"].Database; d == nil || *d != (inventory.Database{Engine: inventory.EnginePostgreSQL, Name: "synapse", Host: "localhost"}) {
		t.Errorf("Synapse's database: %+v", d)
	}
	if facts["Jellyfin"].HWAccel != "vaapi" || facts["Frigate"].HWAccel != "preset-vaapi" {
		t.Errorf("hardware decoding: %q %q", facts["Jellyfin"].HWAccel, facts["Frigate"].HWAccel)
	}
	a := site.Apps
	if a.Jellyfin.Image != "jellyfin/jellyfin:10.11.2" || a.Frigate.Image != "ghcr.io/blakeblackshear/frigate:0.15.1" || a.Synapse.Image != "matrixdotorg/synapse:v1.130.0" ||
		a.SynapseDatabase != "psycopg2" || a.JellyfinHWAccel != "vaapi" {
		t.Errorf("the site's apps: %+v", a)
	}
	if got := findingsOf(fs, inventory.CodeImageNewer); len(got) != 3 {
		t.Errorf("image-newer findings: %+v", got)
	}
	pg := findingsOf(fs, inventory.CodeSynapsePostgres)
	if len(pg) != 1 || pg[0].Severity != inventory.Warning || !strings.Contains(pg[0].Do, "pg_dump") {
		t.Errorf("Synapse on PostgreSQL: %+v", pg)
	}
	// The database's password stays in the VM.
	_, r, _, err := c.GetFile(t.Context(), "matrix", "/etc/matrix-synapse/homeserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := io.ReadAll(r)
	r.Close()
	m := regexp.MustCompile(`password: *"?([^"\n]+)`).FindSubmatch(conf)
	if m == nil {
		t.Fatalf("no password in the PostgreSQL variant's homeserver.yaml:\n%s", conf)
	}
	if js, _ := json.Marshal([]any{facts, site, fs}); strings.Contains(string(js), string(m[1])) {
		t.Errorf("what init read holds Synapse's database password")
	}
}

// TestReadDebianFrigateService: Frigate run by a frigate.service of its
// own (docker run in its ExecStart), not by Compose: init reads its kind
// (service), its image's version and paths from the unit, and the site
// stops it with systemctl (frigate_install = "service").
func TestReadDebianFrigateService(t *testing.T) {
	t.Parallel()
	facts, site, fs, _ := readDebianLab(t, incushost.OldHost{FrigateService: true, FrigateVersion: "0.14.2"}, 51)
	fr := facts["Frigate"]
	if fr == nil || fr.Kind != inventory.KindService || fr.Package != "frigate.service" || fr.Version != "0.14.2" ||
		!slices.Equal(fr.ConfigFiles, []string{"/etc/systemd/system/frigate.service", "/opt/frigate/config/config.yml"}) ||
		!slices.Equal(fr.DataPaths, []string{"/opt/frigate/config", "/var/mnt/data/frigate"}) || fr.Database == nil || fr.Database.Path != "/opt/frigate/config/frigate.db" {
		t.Fatalf("Frigate as a service: %+v", fr)
	}
	if site.Apps.FrigateInstall != "service" || site.Apps.Frigate.Image != "ghcr.io/blakeblackshear/frigate:0.14.2" {
		t.Errorf("the site: frigate_install %q, image %q", site.Apps.FrigateInstall, site.Apps.Frigate.Image)
	}
	if got := findingsOf(fs, inventory.CodeService); len(got) != 1 || !strings.Contains(got[0].Do, "systemctl stop frigate") {
		t.Errorf("the service finding: %+v", got)
	}
	if got := findingsOf(fs, inventory.CodeCompose); len(got) != 0 {
		t.Errorf("a Compose finding for a Frigate without Compose: %+v", got)
	}
	if got := findingsOf(fs, inventory.CodeAppUnread); len(got) != 0 {
		t.Errorf("facts not read: %+v", got)
	}
}
