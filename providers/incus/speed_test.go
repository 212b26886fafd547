package incus_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/incus"
)

// BenchmarkStopStartCycle compares a stop + start cycle through the
// provider (incus_instance_state stop, then its rollback) with `incus stop`
// + `incus start` on the same container, side by side in one run — the
// figure the issue asks for. `make bench` runs it.
func BenchmarkStopStartCycle(b *testing.B) {
	c := client(b)
	p := provider(b, nil)
	name := launch(b, c, "speed", true, nil)
	s := newStep(b, p, incus.InstanceState, "speed", map[string]cty.Value{"instance": str(name), "state": str("stopped"), "keep_for_rollback": cty.False})
	b.Run("provider", func(b *testing.B) {
		for range b.N {
			r, log := s.apply(ctxT(b, 60*time.Second), nil, nil)
			if r.Diagnostics.HasErrors() {
				b.Fatalf("stop: %v %s", r.Diagnostics.Err(), log)
			}
			s.revert(r.Revert)
		}
	})
	b.Run("incus-cli", func(b *testing.B) {
		for range b.N {
			for _, args := range [][]string{{"stop", name}, {"start", name}} {
				if out, err := exec.Command("incus", args...).CombinedOutput(); err != nil {
					b.Fatalf("incus %v: %v %s", args, err, out)
				}
			}
		}
	})
}
