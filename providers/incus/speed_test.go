package incus_test

import (
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/incus"
)

// TestStopStartSpeed compares a stop + start cycle through the provider
// (incus_instance_state stop, then its rollback) with `incus stop` +
// `incus start` on the same container, for the speed note. It
// fails only when the provider is far slower than the CLI.
func TestStopStartSpeed(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "speed", true, nil)
	s := newStep(t, p, incus.InstanceState, "speed", map[string]cty.Value{"instance": str(name), "state": str("stopped"), "keep_for_rollback": cty.False})
	const rounds = 5
	median := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	var prov, cli []time.Duration
	viaProvider := func() {
		start := time.Now()
		r, log := s.apply(ctxT(t, 60*time.Second), nil, nil)
		if r.Diagnostics.HasErrors() {
			t.Fatalf("stop: %v %s", r.Diagnostics.Err(), log)
		}
		s.revert(r.Inverse)
		prov = append(prov, time.Since(start))
	}
	viaCLI := func() {
		start := time.Now()
		for _, args := range [][]string{{"stop", name}, {"start", name}} {
			if out, err := exec.Command("incus", args...).CombinedOutput(); err != nil {
				t.Fatalf("incus %v: %v %s", args, err, out)
			}
		}
		cli = append(cli, time.Since(start))
	}
	for i := range rounds {
		// Alternate which goes first, so neither always meets a
		// daemon just woken or just busy.
		if i%2 == 0 {
			viaProvider()
			viaCLI()
		} else {
			viaCLI()
			viaProvider()
		}
	}
	mp, mc := median(prov), median(cli)
	t.Logf("stop+start cycle, median of %d: provider %s, incus CLI %s", rounds, mp.Round(time.Millisecond), mc.Round(time.Millisecond))
	if mp > 3*mc+time.Second {
		t.Errorf("the provider's stop+start cycle (%s) is far slower than the CLI's (%s)", mp, mc)
	}
}
