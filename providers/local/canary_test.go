package local_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestCanary: a secret planted in every input of every step type, marked
// as a sensitive variable marks it, leaves the provider by no field, log
// or diagnostic, in clear or encoded, whether the step succeeds or fails;
// for a plain secret and for each of providertest.Canaries.
func TestCanary(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		canary(t, "canary-local-5e1f")
	})
	for _, c := range providertest.Canaries {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			canary(t, c.Value)
		})
	}
}

func canary(t *testing.T, s string) {
	sens := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "dir-"+s), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != s {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(srv.Close)
	// The command prints the secret every way it can: whole, split
	// across writes, on stderr, and in the error's last lines.
	script := `echo "$T"; printf '%s' "${T%????}"; sleep 0.01; echo "${T#${T%????}}"; echo "$1" >&2`
	undo := `echo "undo $1 $T"`
	execCfg := func(fail bool) cty.Value {
		code := "0"
		if fail {
			code = "3"
		}
		return cty.ObjectVal(map[string]cty.Value{
			"command":        cty.ListVal([]cty.Value{cty.StringVal("sh"), cty.StringVal("-c"), cty.StringVal(script + "; exit " + code), cty.StringVal("zero"), sens(s)}),
			"env":            cty.MapVal(map[string]cty.Value{"T": sens(s), "PLAIN": cty.StringVal("visible")}),
			"dir":            sens("dir-" + s),
			"creates":        sens("made-" + s),
			"revert":         cty.ListVal([]cty.Value{cty.StringVal("sh"), cty.StringVal("-c"), cty.StringVal(undo), cty.StringVal("zero"), sens(s)}),
			"revert_creates": sens("undone-" + s),
		})
	}
	providertest.Canary(t, providertest.Harness{New: func() providers.Interface { return local.New() }, Dir: dir}, []providertest.CanaryCase{
		{Type: "exec", Config: execCfg(false), Secrets: []string{s}},
		{Type: "exec", Config: execCfg(true), Secrets: []string{s}},
		{Type: "exec", Config: cty.ObjectVal(map[string]cty.Value{"command": cty.ListVal([]cty.Value{sens("/no/such/" + s)})}), Secrets: []string{s}},
		{Type: "http_check", Config: cty.ObjectVal(map[string]cty.Value{"url": sens(srv.URL + "/?token=" + url.QueryEscape(s)), "timeout": cty.StringVal("2s")}), Secrets: []string{s}},
		{Type: "http_check", Config: cty.ObjectVal(map[string]cty.Value{"url": sens(srv.URL + "/?token=wrong-" + url.QueryEscape(s)), "timeout": cty.StringVal("50ms"), "interval": cty.StringVal("10ms")}), Secrets: []string{s}},
		{Type: "approval", Config: cty.ObjectVal(map[string]cty.Value{"message": sens("say " + s)}), Secrets: []string{s}},
		{Type: "approval", Config: cty.ObjectVal(map[string]cty.Value{"message": sens("say " + s), "revert_message": sens("undo " + s)}), Secrets: []string{s}},
		{Type: "wait", Config: cty.ObjectVal(map[string]cty.Value{"duration": sens("1ms")}), Secrets: []string{s}},
	})
}
