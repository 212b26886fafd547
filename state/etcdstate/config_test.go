package etcdstate_test

import (
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/state/etcdstate"
)

// A password is refused without TLS, saying what to do and never itself,
// unless Insecure says so; TLS is what the etcd client dials with: a first
// endpoint of http:// or unix:// drops it whatever ca says.
func TestPasswordNeedsTLS(t *testing.T) {
	const pw = "canary-Passw0rd"
	for _, tc := range []struct {
		name      string
		endpoints []string
		ca        string
		insecure  bool
		plaintext bool
		refused   bool
	}{
		{"no scheme, no ca", []string{"10.0.0.5:2379"}, "", false, true, true},
		{"http", []string{"http://10.0.0.5:2379"}, "", false, true, true},
		{"http first, with ca", []string{"http://10.0.0.5:2379", "https://10.0.0.6:2379"}, "ca.pem", false, true, true},
		{"unix", []string{"unix:///run/etcd.sock"}, "ca.pem", false, true, true},
		{"insecure", []string{"10.0.0.5:2379"}, "", true, true, false},
		{"ca", []string{"10.0.0.5:2379"}, "ca.pem", false, false, false},
		{"https", []string{"https://10.0.0.5:2379"}, "", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := etcdstate.Config{Endpoints: tc.endpoints, Prefix: "migrate/x/", CA: tc.ca,
				Username: "migrate", Password: pw, Insecure: tc.insecure}
			if got := cfg.Plaintext(); got != tc.plaintext {
				t.Errorf("Plaintext() = %v, want %v", got, tc.plaintext)
			}
			err := cfg.Validate()
			if !tc.refused {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("a password over plaintext was accepted")
			}
			for _, want := range []string{"password over plaintext gRPC", tc.endpoints[0], "ca", "insecure = true"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("the refusal shows the password: %v", err)
			}
			cfg.Username, cfg.Password = "", ""
			if err := cfg.Validate(); err != nil {
				t.Errorf("without a password, plaintext is refused: %v", err)
			}
		})
	}
}
