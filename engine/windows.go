package engine

import (
	"maps"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// windowEnd is what a step is to a service's window of downtime.
type windowEnd int

const (
	opensWindow  windowEnd = iota + 1 // a stop step: the old instance goes down
	closesWindow                      // the serving check: the new one answers
)

// windowEnds says which steps open and close the runbook's services'
// windows (a step stops one service at most: the loader says so).
func windowEnds(services []*phases.Service) map[phases.Address]windowEnd {
	ends := map[phases.Address]windowEnd{}
	for _, svc := range services {
		for _, a := range svc.Stop {
			ends[a] = opensWindow
		}
		ends[svc.Serving] = closesWindow
	}
	return ends
}

// keptFacts are the facts of a window a step's record carries into a new
// attempt (whose apply replaces the others), read from rec as it is
// before the attempt starts: a stop step keeps when it first began
// (FactDownSince) until it is new again or reverted, so that a stop
// resumed after a kill, tried again or updated does not shorten the
// window; a serving check keeps when it first passed (FactServingSince)
// while it passes, and loses it once it failed or was reverted.
func (e *Engine) keptFacts(s *phases.Step, rec *state.StepRecord, now time.Time) map[string]string {
	switch e.windows[s.Addr] {
	case opensWindow:
		since := rec.Facts[phases.FactDownSince]
		switch {
		case rec.Status == state.Pending || rec.Status == state.Reverted:
			since = ""
		case since == "" && (rec.Status == state.Running || rec.Status == state.Failed) && rec.StartedAt != nil:
			since = factTime(*rec.StartedAt) // a record of before the fact
		}
		if since == "" {
			since = factTime(now)
		}
		return map[string]string{phases.FactDownSince: since}
	case closesWindow:
		if since := rec.Facts[phases.FactServingSince]; since != "" && (rec.Status == state.Done || rec.Status == state.Running) {
			return map[string]string{phases.FactServingSince: since}
		}
	}
	return nil
}

// withKept is the facts an apply established with the kept ones of its
// window (which win: the provider knows nothing of windows); a serving
// check that passes without one has served since now.
func (e *Engine) withKept(s *phases.Step, facts, kept map[string]string, now time.Time) map[string]string {
	if e.windows[s.Addr] == closesWindow && kept[phases.FactServingSince] == "" {
		kept = map[string]string{phases.FactServingSince: factTime(now)}
	}
	if len(kept) == 0 {
		return facts
	}
	out := maps.Clone(facts)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, kept)
	return out
}

// factTime is t as a window's facts hold it.
func factTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
