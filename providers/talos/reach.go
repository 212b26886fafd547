package talos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Reaching the node. A node that does not answer failed every step with
// the gRPC client's "Unavailable: connection error: desc = transport:
// Error while dialing …", naming neither the step's endpoint nor what to
// check. So a step first dials the provider's endpoints: the first step to
// find them down gets the whole story (the endpoint, where it comes from,
// what to check), and the steps after it one line that points at that
// step. A call that cannot connect later on says the same.

const (
	// dialTimeout bounds the probe: an address that drops packets (a VM
	// not booted) would otherwise hold the step for the call's timeout.
	dialTimeout = 5 * time.Second
	// answeredFor is how long an answer spares the next steps the probe.
	answeredFor = 2 * time.Second
	// downFor is how long a failed probe holds for the other steps; a
	// step tried again (a retry) probes again.
	downFor = 10 * time.Second
)

// errUnavailable marks an API call that could not dial the node (gRPC
// code Unavailable, "while dialing"); its text is the code's name, as
// apiErr wrote it before.
var errUnavailable = errors.New("Unavailable")

// reach is what the provider's steps know of its endpoints' answers.
type reach struct {
	mu       sync.Mutex
	answered time.Time
	down     *outage
}

// outage is a failed probe: when, why, and the step that found it.
type outage struct {
	first phases.Address
	err   error
	at    time.Time
}

// reachable dials the endpoints of the provider for the step c, and
// returns the diagnostic of endpoints none of which answers.
func (c *call) reachable(ctx context.Context) phases.Diagnostics {
	cl, err := c.p.conn(ctx)
	if err != nil {
		return phases.FromError("Cannot Reach Talos", err)
	}
	eps := cl.GetEndpoints()
	if len(eps) == 0 {
		return nil
	}
	r := &c.p.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case r.down == nil && now.Sub(r.answered) < answeredFor:
		return nil
	case r.down != nil && r.down.first != c.addr && now.Sub(r.down.at) < downFor:
		return c.seeFirst(r.down)
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var errs []error
	for _, e := range eps {
		conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", dialAddress(e))
		if err == nil {
			conn.Close()
			r.answered, r.down = time.Now(), nil
			return nil
		}
		errs = append(errs, err)
	}
	if ctx.Err() != nil {
		return sdk.Interrupted(c.addr, ctx.Err())
	}
	return c.lost(errors.Join(errs...))
}

// unreachable is the diagnostic of a call of the step that could not
// reach the node (err wraps errUnavailable), nil for any other error.
func (c *call) unreachable(err error) phases.Diagnostics {
	if !errors.Is(err, errUnavailable) {
		return nil
	}
	c.p.reach.mu.Lock()
	defer c.p.reach.mu.Unlock()
	return c.lost(err)
}

// lost records that the step could not connect (err) and returns its
// diagnostic: the whole one for the first step to find the endpoints
// down, a line pointing at that step for the others. reach.mu is held.
func (c *call) lost(err error) phases.Diagnostics {
	r := &c.p.reach
	if r.down != nil && r.down.first != c.addr {
		r.down.at, r.down.err = time.Now(), err
		return c.seeFirst(r.down)
	}
	r.down = &outage{first: c.addr, err: err, at: time.Now()}
	return phases.Errorf("Cannot Reach Talos",
		"%s cannot reach the Talos API of node %s at %s: %v. The endpoint comes from %s. "+
			"Check that the node is up (booted, its Talos API listening on port %d: a VM still booting does not answer yet); "+
			"that the address is right (for a VM, the address its incus_instance step reports); "+
			"and that nothing between this machine and the node blocks the port.",
		c.addr, strings.Join(c.p.targets(), ", "), c.endpoints(), err, c.endpointSource(), constants.ApidPort)
}

// seeFirst is the diagnostic of the steps after the first to find the
// endpoints down.
func (c *call) seeFirst(o *outage) phases.Diagnostics {
	return phases.Errorf("Cannot Reach Talos", "%s: the Talos API at %s did not answer (see %s).", c.addr, c.endpoints(), o.first)
}

// endpoints are the addresses the client dials.
func (c *call) endpoints() string {
	c.p.mu.Lock()
	cl := c.p.client
	c.p.mu.Unlock()
	if cl == nil {
		return strings.Join(c.s.endpoints, ", ")
	}
	var out []string
	for _, e := range cl.GetEndpoints() {
		out = append(out, dialAddress(e))
	}
	return strings.Join(out, ", ")
}

// endpointSource says where the endpoints come from.
func (c *call) endpointSource() string {
	if len(c.s.endpoints) > 0 {
		return fmt.Sprintf("the endpoints of the talos provider block %q", c.s.name)
	}
	name := c.s.contextName
	if name == "" && c.s.talosconfig != nil {
		name = c.s.talosconfig.Context
	}
	file := c.s.talosconfigPath
	if file == "" {
		file = "$TALOSCONFIG or ~/.talos/config"
	}
	return fmt.Sprintf("context %q of the talosconfig %s (the talos provider block sets no endpoints)", name, file)
}

// dialAddress is an endpoint as host:port, Talos's API port when it names
// none.
func dialAddress(e string) string {
	if u, err := url.Parse(e); err == nil && u.Host != "" {
		e = u.Host
	}
	if _, _, err := net.SplitHostPort(e); err == nil {
		return e
	}
	return net.JoinHostPort(strings.Trim(e, "[]"), strconv.Itoa(constants.ApidPort))
}
