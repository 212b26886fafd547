package phases_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
)

func order(list []*phases.Phase) ([]string, error) {
	po, err := phases.OrderPhases(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range po.List {
		out = append(out, p.Name)
	}
	return out, nil
}

// Phases run after those they name, in declaration order otherwise; a
// cycle is refused with its path.
func TestPhaseOrder(t *testing.T) {
	t.Parallel()
	list := []*phases.Phase{{Name: "a", After: []string{"c"}}, {Name: "b"}, {Name: "c"}}
	got, err := order(list)
	if err != nil || !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Errorf("order %v (%v), want [c a b]", got, err)
	}
	list[2].After = []string{"b", "a"}
	if _, err := order(list); err == nil || !strings.Contains(err.Error(), "a -> c -> a") {
		t.Errorf("cycle: %v", err)
	}
	list[2].After = []string{"nowhere"}
	if _, err := order(list); err == nil || !strings.Contains(err.Error(), `unknown phase "nowhere"`) {
		t.Errorf("unknown phase: %v", err)
	}
}
