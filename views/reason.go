package views

import (
	"fmt"
	"strings"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
)

// Because says in words why a step gets its action: the engine decides
// by reason codes (engine.ReasonCode) and what they name (engine.Why);
// these are the sentences people read. Empty when the action says it all.
func Because(code engine.ReasonCode, why engine.Why) string {
	by := addrs(why.By)
	if len(why.After) > 0 {
		// Read again just before it would have been passed over.
		again := "read again after " + addrs(why.After) + " ran"
		switch code {
		case engine.Unreadable:
			return again + ", it could not be observed: " + why.Detail
		case engine.EffectGone, engine.Drifted:
			return again + ": " + or(why.Detail, "its effect is not there")
		}
	}
	switch code {
	case engine.FailedLastTime:
		return "failed last time: " + why.Detail
	case engine.RevertUnfinished:
		return "a rollback of this step did not finish"
	case engine.InFlight:
		return "was running when a run stopped: it is observed first and redone only if it did not finish"
	case engine.ProviderWaits:
		return fmt.Sprintf("its provider %s is configured with values (known after %s)", why.Detail, by)
	case engine.InputsChanged:
		return "its inputs changed since it ran"
	case engine.InputsUnknown:
		return "its inputs depend on steps that will change"
	case engine.InputsUntold:
		return "its provider cannot tell yet whether what it depends on changed"
	case engine.InputKeyMissing:
		return "its record's input hash is keyed (key " + why.Was + ", from the age identity it ran with) and this run has no age identity: set MIGRATE_AGE_IDENTITY or --age-identity to that identity, or it runs again"
	case engine.InputKeyOther:
		return "its record's input hash was made under another key (" + why.Was + ", this run's is " + why.Now + "): another age identity; set the one it ran with to compare, or it runs again"
	case engine.UpstreamReplaced:
		what := by + " was made again since this step ran"
		if why.Now != "" {
			return what + " (it is " + why.Now + " now): the record describes the world before"
		}
		return what + ", on something else: the record describes the world before"
	case engine.TargetReplaced:
		return fmt.Sprintf("what it acts on was replaced since it ran (%s then, %s now): the record describes the one before", why.Was, why.Now)
	case engine.Drifted:
		return why.Detail
	case engine.EffectGone:
		return or(why.Detail, "its effect is gone")
	case engine.Unreadable:
		return "cannot be read before " + by + " ran: read again after them"
	case engine.Discarded:
		return "went with " + by + " (done): not read again"
	case engine.DiscardGoing:
		return "it goes with " + by + ", which a stopped run was applying"
	case engine.HandedOver:
		return "handed over to " + by + ", which a stopped run was applying: read again once it is recorded"
	case engine.NothingToUndo:
		return "nothing to undo: it went with " + by
	case engine.KeyRemoved:
		return "its key is no longer in the for_each of " + by + ": " + or(why.Detail, "undo")
	case engine.GroupRemoved:
		return groupGone(why) + ": " + or(why.Detail, "undo")
	case engine.StepRemoved:
		return "no longer in the runbook (renamed? a moved block from its old address keeps its record): " + or(why.Detail, "undo")
	}
	return ""
}

// groupGone says which group call instance went, with the step, from
// the step the reason names (group.CALL["KEY"].TYPE.NAME).
func groupGone(why engine.Why) string {
	if len(why.By) == 0 || why.By[0].Group == "" {
		return "its group call instance is no longer in its call's for_each"
	}
	a := why.By[0]
	return "its group call instance " + a.GroupPrefix() + " is no longer in the for_each of group." + a.Group
}

// eventBecause is Because for an event, empty when it has no reason.
func eventBecause(e engine.Event) string {
	if e.Why == nil {
		return Because(e.ReasonCode, engine.Why{})
	}
	return Because(e.ReasonCode, *e.Why)
}

func addrs(list []phases.Address) string {
	s := make([]string, len(list))
	for i, a := range list {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
