package helm_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// A release upgraded by hand (helm upgrade) after migrate installed it: the
// rollback plan says, before anything is done, that undoing the step
// discards the revisions made outside migrate — here by uninstalling.
func TestRollbackPlanNamesRevisionsMadeOutside(t *testing.T) {
	t.Parallel()
	k := lab(t)
	ns := k.namespace(t, "outside")
	ph := &phases.Phase{Name: "apps"}
	ph.Steps = []*phases.Step{{
		Addr: phases.Address{Type: helm.Release, Name: "app"}, Phase: "apps", Provider: "helm.default",
		Config: phases.Static(appRelease(ns, map[string]cty.Value{"message": str("by migrate")})),
	}}
	rb := &phases.Runbook{Dir: testdata(t), Phases: []*phases.Phase{ph}, Providers: []*phases.ProviderConfig{{
		Type: "helm", Name: "default", Config: phases.Static(obj(map[string]cty.Value{"kubeconfig": str(k.path)})),
	}}}
	dir := t.TempDir()
	open := func() (*engine.Engine, *state.Local) {
		st, err := state.Open(dir, state.Options{Lock: state.NewLockInfo("test"), MigrateVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		e, diags := engine.New(context.Background(), engine.Options{
			Runbook: rb, State: st,
			Factories: map[string]providers.Factory{"helm": func() providers.Interface { return helm.New() }},
		})
		if diags.HasErrors() {
			st.Close()
			t.Fatal(diags.Err())
		}
		t.Cleanup(func() { _ = e.Close() })
		return e, st
	}
	e, st := open()
	plan, diags := e.Plan(context.Background(), engine.PlanOptions{})
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	if err := e.Run(context.Background(), context.Background(), plan, engine.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Two upgrades by hand, as the helm CLI does them.
	ch, err := loader.Load(filepath.Join(testdata(t), "charts/app"))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"by hand", "by hand again"} {
		up := action.NewUpgrade(k.helmConfig(t, ns))
		up.Namespace = ns
		if _, err := up.Run("app", ch, map[string]any{"message": msg}); err != nil {
			t.Fatal(err)
		}
	}

	e, st = open()
	defer st.Close()
	rp, err := e.PlanRollback(nil)
	if err != nil {
		t.Fatal(err)
	}
	e.NoteChanges(context.Background(), rp)
	var out bytes.Buffer
	views.New(views.Options{Stdout: &out, Stderr: &out}).RollbackPlan(rp)
	for _, want := range []string{
		"uninstall release " + ns + "/app",
		"release " + ns + "/app is at revision 3",
		"migrate made revision 1: revisions 2–3 were made outside migrate",
		"undoing it discards that change too",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the rollback plan lacks %q:\n%s", want, out.String())
		}
	}
	if got := k.history(t, ns, "app"); got != "1:superseded 2:superseded 3:deployed" {
		t.Errorf("planning the rollback changed the release: %s", got)
	}
}
