package sdk

import (
	"context"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/phases"
)

// Reaching a server. A server that does not answer fails every step that
// uses it with the same connection error, none saying which server it
// was or what to check. So a step first dials it (Reach.Probe): the first
// step to find it down gets the whole story (Unreachable.First: the
// address, where it comes from, what to check), and the steps after it
// one line that points at that step (Unreachable.Again). A call that
// fails to connect later on (the probe passed a moment before) says the
// same (Reach.Lost).

const (
	// DialTimeout bounds a probe: an address that drops packets (a VM
	// not booted) would otherwise hold every step for the system's TCP
	// timeout.
	DialTimeout = 5 * time.Second
	// answeredFor is how long an answer spares the next steps the probe.
	answeredFor = 2 * time.Second
	// downFor is how long a failed probe holds for the other steps: a
	// plan of twelve steps against an address that drops packets waits
	// once, not twelve times. A step tried again (a retry) probes again.
	downFor = 10 * time.Second
)

// Reach is what the steps using one server know of its answers. Its zero
// value is ready; it is safe for concurrent use.
type Reach struct {
	mu       sync.Mutex
	answered time.Time // the last successful probe
	down     *outage   // since the last failed probe, nil once it answers
}

// outage is a failed probe: when, and the step that found it.
type outage struct {
	first phases.Address
	at    time.Time
}

// Unreachable words the diagnostics of a server that does not answer.
type Unreachable struct {
	// First is the diagnostic of the step that found the server down,
	// with the error of its dial: the whole story.
	First func(err error) phases.Diagnostics
	// Again is the diagnostic of the steps after it: a line pointing at
	// the step that found it down (first).
	Again func(first phases.Address) phases.Diagnostics
}

// Probe dials the server for the step at addr, unless it answered a
// moment ago (nil) or another step found it down a moment ago (say.Again,
// without dialling). dial connects once and closes; its context ends
// after DialTimeout. Probes are serialised: the steps after a slow one
// learn its answer.
func (r *Reach) Probe(ctx context.Context, addr phases.Address, dial func(context.Context) error, say Unreachable) phases.Diagnostics {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case r.down == nil && now.Sub(r.answered) < answeredFor:
		return nil
	case r.down != nil && r.down.first != addr && now.Sub(r.down.at) < downFor:
		return say.Again(r.down.first)
	}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	err := dial(dctx)
	if err == nil {
		r.answered, r.down = time.Now(), nil
		return nil
	}
	if ctx.Err() != nil {
		return Interrupted(addr, ctx.Err())
	}
	return r.lost(addr, err, say)
}

// Lost records that a call of the step at addr could not connect (err)
// and returns its diagnostic: say.First for the first step to find the
// server down, say.Again for the others.
func (r *Reach) Lost(addr phases.Address, err error, say Unreachable) phases.Diagnostics {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost(addr, err, say)
}

// lost is Lost with r.mu held.
func (r *Reach) lost(addr phases.Address, err error, say Unreachable) phases.Diagnostics {
	if r.down != nil && r.down.first != addr {
		r.down.at = time.Now()
		return say.Again(r.down.first)
	}
	r.down = &outage{first: addr, at: time.Now()}
	return say.First(err)
}
