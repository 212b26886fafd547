package views_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/views"
)

// TestBecause: the engine decides by reason codes; these are the words
// people read for them, as the engine wrote them before.
func TestBecause(t *testing.T) {
	vm := []phases.Address{addr("incus_instance.vm")}
	for _, row := range []struct {
		code engine.ReasonCode
		why  engine.Why
		want string
	}{
		{engine.NeverRan, engine.Why{}, ""},
		{engine.FailedLastTime, engine.Why{Detail: "exit 1"}, "failed last time: exit 1"},
		{engine.UpstreamReplaced, engine.Why{By: vm, Now: "uuid-2"}, "incus_instance.vm was made again since this step ran (it is uuid-2 now): the record describes the world before"},
		{engine.UpstreamReplaced, engine.Why{By: vm}, "incus_instance.vm was made again since this step ran, on something else: the record describes the world before"},
		{engine.TargetReplaced, engine.Why{Was: "a", Now: "b"}, "what it acts on was replaced since it ran (a then, b now): the record describes the one before"},
		{engine.EffectGone, engine.Why{}, "its effect is gone"},
		{engine.EffectGone, engine.Why{After: vm}, "read again after incus_instance.vm ran: its effect is not there"},
		{engine.Drifted, engine.Why{After: vm, Detail: "mode changed"}, "read again after incus_instance.vm ran: mode changed"},
		{engine.Unreadable, engine.Why{After: vm, Detail: "refused"}, "read again after incus_instance.vm ran, it could not be observed: refused"},
		{engine.Unreadable, engine.Why{By: vm}, "cannot be read before incus_instance.vm ran: read again after them"},
		{engine.ProviderWaits, engine.Why{By: vm, Detail: "talos.node"}, "its provider talos.node is configured with values (known after incus_instance.vm)"},
		{engine.NothingToUndo, engine.Why{By: vm}, "nothing to undo: it went with incus_instance.vm"},
		{engine.KeyRemoved, engine.Why{By: []phases.Address{{Group: "app", GroupKey: "jellyfin", Type: "exec", Name: "export"}}, Detail: "rm -r /srv/export"},
			`its key is no longer in the for_each of group.app["jellyfin"].exec.export: rm -r /srv/export`},
		{engine.GroupRemoved, engine.Why{By: []phases.Address{{Group: "app", GroupKey: "jellyfin", Type: "helm_release", Name: "app"}}, Detail: "helm uninstall jellyfin"},
			`its group call instance group.app["jellyfin"] is no longer in the for_each of group.app: helm uninstall jellyfin`},
		{engine.StepRemoved, engine.Why{Detail: "run: rm -rf /srv/node"},
			"no longer in the runbook (renamed? a moved block from its old address keeps its record): run: rm -rf /srv/node"},
		{engine.InputKeyOther, engine.Why{Was: "k1", Now: "k2"}, "its record's input hash was made under another key (k1, this run's is k2): another age identity; set the one it ran with to compare, or it runs again"},
	} {
		if got := views.Because(row.code, row.why); got != row.want {
			t.Errorf("Because(%s, %+v) = %q, want %q", row.code, row.why, got, row.want)
		}
	}
}
