package incus_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
)

// TestInstanceWaitStopped: a gentle stop (the first Ctrl-C: the request's
// Stop closed) ends wait_for at once, on the real daemon. The instance
// stays, created and started; the answer says Stopped, with its revert data
// and what was not waited for. Applied again, as the next run does, the
// step finds the instance, creates nothing, and only waits; its revert data
// deletes it.
func TestInstanceWaitStopped(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := unique("stopwait")
	cleanupInstance(t, c, name)
	// On no network: its address never comes, the wait would last 10m.
	s := newStep(t, p, incus.Instance, "node", map[string]cty.Value{
		"name": str(name), "type": str("container"), "image": str(testImage), "start": cty.True,
		"wait_for": str("ipv4"), "wait_timeout": str("10m"),
	})
	planned := s.mustPlan(nil).Private

	// stopped applies the step, closes Stop once the instance runs, and
	// returns the answer and how long it took after the stop.
	stopped := func(prior *providers.Prior) (providers.ApplyResponse, string, time.Duration) {
		t.Helper()
		stop := make(chan struct{})
		type result struct {
			r   providers.ApplyResponse
			log string
		}
		done := make(chan result, 1)
		go func() {
			var log bytes.Buffer
			r := p.Apply(ctxT(t, 5*time.Minute), providers.ApplyRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Planned: planned, Prior: prior, Log: &log, Stop: stop})
			done <- result{r, log.String()}
		}()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if i, _, err := c.Instance(ctxT(t, 10*time.Second), name); err == nil && i.Status == "Running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %s did not start", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // into the wait
		at := time.Now()
		close(stop)
		select {
		case res := <-done:
			return res.r, res.log, time.Since(at)
		case <-time.After(30 * time.Second):
			t.Fatal("closing Stop did not end wait_for")
		}
		panic("unreachable")
	}

	r, log, took := stopped(nil)
	t.Logf("wait_for (10m) ended %s after the stop; log:\n%s", took.Round(time.Microsecond), log)
	if took > 5*time.Second {
		t.Errorf("wait_for ended %s after the stop, want at once", took)
	}
	if !r.Stopped {
		t.Fatalf("the answer is not Stopped: %v", r.Diagnostics)
	}
	wantDiag(t, r.Diagnostics, "Stopped While Waiting", `instance "`+name+`" has the step's settings and is running`, "its IPv4 address (wait_for; last seen: status Running", "was not waited for")
	wantContains(t, "the log", log, "instance "+name+" created", "waiting up to 10m0s for an IPv4 address", "stopped waiting for an IPv4 address")
	if r.Revert == nil || r.Revert.Description != "delete instance "+name+" (stopped by force first)" {
		t.Fatalf("the revert data of a stopped wait is %+v, want the delete", r.Revert)
	}
	created := inst(t, c, name).CreatedAt

	// The next run: the engine gives the kept revert data as the prior.
	again, log, _ := stopped(&providers.Prior{Revert: r.Revert, Outputs: cty.EmptyObjectVal})
	if !again.Stopped || again.Revert == nil || again.Revert.Description != r.Revert.Description {
		t.Errorf("applied again: Stopped=%v revert data %+v (%v)", again.Stopped, again.Revert, again.Diagnostics)
	}
	wantContains(t, "the log applied again", log, "already has the settings the step manages", "waiting up to 10m0s")
	if i := inst(t, c, name); !i.CreatedAt.Equal(created) {
		t.Errorf("applied again, the instance was made anew: created %v, then %v", created, i.CreatedAt)
	}
	s.revert(again.Revert)
	if _, _, err := c.Instance(ctxT(t, 10*time.Second), name); err == nil {
		t.Errorf("the revert data of the stopped step left instance %s", name)
	}
}

// TestInstanceWaitStoppedAfterAnUpdate: a stop that cuts the wait after
// changing an instance the step did not create keeps the revert data that
// restores its settings, and so does the apply of the next run, which
// changes nothing and would otherwise say "nothing to undo".
func TestInstanceWaitStoppedAfterAnUpdate(t *testing.T) {
	t.Parallel()
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "stopupd", true, nil)
	s := newStep(t, p, incus.Instance, "node", map[string]cty.Value{
		"name": str(name), "type": str("container"), "image": str(testImage), "start": cty.True,
		"config": strMap(map[string]string{"user.migrate-test": "stop"}), "wait_for": str("ipv4"), "wait_timeout": str("10m"),
	})
	var prior *providers.Prior
	for i := range 2 {
		stop := make(chan struct{})
		close(stop) // asked before the wait begins: the change is made, the wait is not
		var log bytes.Buffer
		r := p.Apply(ctxT(t, 2*time.Minute), providers.ApplyRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Planned: s.mustPlan(prior).Private, Prior: prior, Log: &log, Stop: stop})
		if !r.Stopped || r.Revert == nil || !strings.Contains(r.Revert.Description, "restore the previous config and devices of instance "+name) {
			t.Fatalf("apply %d: Stopped=%v revert data %+v (%v)\n%s", i+1, r.Stopped, r.Revert, r.Diagnostics, log.String())
		}
		if got := inst(t, c, name).Config["user.migrate-test"]; got != "stop" {
			t.Fatalf("apply %d did not make its change before the wait: %q", i+1, got)
		}
		prior = &providers.Prior{Revert: r.Revert, Outputs: cty.EmptyObjectVal}
	}
	s.revert(prior.Revert)
	if got, ok := inst(t, c, name).Config["user.migrate-test"]; ok {
		t.Errorf("the kept revert data did not restore the config: %q is still set", got)
	}
}
