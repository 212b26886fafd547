package views_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/views"
)

// TestInitPrintsApps: the report says, under its VM, each app's install
// kind, version, database engine and config files; a name read in a VM
// that holds a terminal control is shown as text.
func TestInitPrintsApps(t *testing.T) {
	t.Parallel()
	host := &inventory.Host{Target: "lab", Instances: []inventory.Instance{{Name: "matrix", Type: "virtual-machine", Status: "Running", Agent: inventory.AgentRunning,
		Apps: []inventory.App{{Name: "Synapse", Facts: &inventory.AppFacts{Kind: inventory.KindDebian, Package: "matrix-synapse-py3", Version: "1.120.2+bookworm1",
			ConfigFiles: []string{"/etc/matrix-synapse/homeserver.yaml", "/etc/matrix-synapse/conf.d/\x1b]0;owned\x07.yaml"},
			Database:    &inventory.Database{Engine: inventory.EnginePostgreSQL, Name: "synapse", Host: "localhost"}}}}}}}
	var out bytes.Buffer
	views.New(views.Options{Stdout: &out, Stderr: &out, Width: 200}).Init(views.InitReport{Host: host})
	got := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"app Synapse 1.120.2+bookworm1 (Debian package matrix-synapse-py3); database PostgreSQL synapse on localhost; config /etc/matrix-synapse/homeserver.yaml /etc/matrix-synapse/conf.d/"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.ContainsRune(out.String(), 0x1b) {
		t.Errorf("a terminal control read in the VM reaches the terminal:\n%q", out.String())
	}
}
