package local_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

func conformanceCases(t *testing.T) []providertest.Case {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	smb := newSamba(t) // a real smbd: smb_check lists its shares
	smb.start(t)
	return []providertest.Case{
		{Type: "exec", Reversible: true, Config: obj(map[string]cty.Value{
			"command": strs("sh", "-c", "echo conformance > made.txt"),
			"creates": cty.StringVal("made.txt"),
			"revert":  strs("rm", "-f", "made.txt"), // safe to repeat, as reverts must be
			"env":     cty.MapVal(map[string]cty.Value{"CONFORMANCE": cty.StringVal("yes-indeed")}),
		})},
		{Type: "exec", Config: obj(map[string]cty.Value{"command": strs("true")})},
		{Type: "http_check", Reversible: true, Config: obj(map[string]cty.Value{
			"url":     cty.StringVal(srv.URL + "/healthz"),
			"timeout": cty.StringVal("5s"),
		})},
		{Type: "smb_check", Reversible: true, Config: smbCfg(smb.addr, []string{"files", "photos"}, "2m")},
		{Type: "approval", Reversible: true, Config: obj(map[string]cty.Value{"message": cty.StringVal("switch DNS at the registrar")})},
		{Type: "approval", Reversible: true, Config: obj(map[string]cty.Value{"message": cty.StringVal("switch DNS at the registrar"), "revert_message": cty.StringVal("switch it back")})},
		{Type: "wait", Reversible: true, Config: obj(map[string]cty.Value{"duration": cty.StringVal("10ms")})},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		New:   func() providers.Interface { return local.New() },
		Dir:   t.TempDir(),
		Cases: conformanceCases(t),
	})
}

func TestConformanceWithoutPIDNamespace(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		New:   func() providers.Interface { return local.WithoutPIDNamespace(local.New()) },
		Dir:   t.TempDir(),
		Cases: conformanceCases(t),
	})
}
