package phases_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want phases.Address
		ok   bool
	}{
		{"exec.backup", phases.Address{Type: "exec", Name: "backup"}, true},
		{"talos_kubeconfig.main", phases.Address{Type: "talos_kubeconfig", Name: "main"}, true},
		{"exec", phases.Address{}, false},
		{"exec.", phases.Address{}, false},
		{".x", phases.Address{}, false},
		{"a.b.c", phases.Address{}, false},
		{"approval.caf\u00e9", phases.Address{Type: "approval", Name: "caf\u00e9"}, true},
	} {
		got, err := phases.ParseAddress(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseAddress(%q) = %v, %v", tc.in, got, err)
		}
		// The same name with a combining accent is the same address.
		if d := strings.ReplaceAll(tc.in, "\u00e9", "e\u0301"); d != tc.in {
			if got, _ := phases.ParseAddress(d); got != tc.want {
				t.Errorf("ParseAddress(%q) = %v, want %v", d, got, tc.want)
			}
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

func TestAddressJSONKeys(t *testing.T) {
	t.Parallel()
	in := map[phases.Address]int{{Type: "exec", Name: "a"}: 1}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"exec.a":1}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var out map[phases.Address]int
	if err := json.Unmarshal(b, &out); err != nil || out[phases.Address{Type: "exec", Name: "a"}] != 1 {
		t.Fatalf("Unmarshal = %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"nodot":1}`), &out); err == nil {
		t.Error("a key without a dot was accepted")
	}
}

func TestDiagnosticsErr(t *testing.T) {
	t.Parallel()
	var none phases.Diagnostics
	if none.Err() != nil {
		t.Error("no diagnostics is no error")
	}
	warn := phases.Diagnostics{{Severity: phases.Warning, Summary: "Careful"}}
	if warn.HasErrors() || warn.Err() != nil {
		t.Error("a warning is not an error")
	}
	r := phases.Range{Filename: "main.hcl", StartLine: 3, StartCol: 5}
	d := append(warn, phases.Diagnostic{Severity: phases.Error, Summary: "Bad Thing", Detail: "it broke", Subject: &r})
	d = append(d, phases.Errorf("Second", "also %s", "this")...)
	msg := d.Err().Error()
	for _, want := range []string{"main.hcl:3,5: Bad Thing: it broke", "Second: also this"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Err() = %q, missing %q", msg, want)
		}
	}
	if strings.Contains(msg, "Careful") {
		t.Errorf("Err() = %q includes the warning", msg)
	}
}

// A phase named on the command line with a decomposed accent is the one
// the runbook declares composed.
func TestPhaseNameNormalized(t *testing.T) {
	rb := &phases.Runbook{Phases: []*phases.Phase{{Name: "caf\u00e9"}}}
	if rb.Phase("cafe\u0301") == nil {
		t.Error("a decomposed name did not find the phase")
	}
}
