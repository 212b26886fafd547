package talos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Reaching the node (sdk.Reach): a node that does not answer failed
// every step with the gRPC client's "Unavailable: connection error: desc
// = transport: Error while dialing …", naming neither the step's endpoint
// nor what to check. So a step first dials the provider's endpoints: the
// first step to find them down gets the whole story (the endpoint, where
// it comes from, what to check), and the steps after it one line that
// points at that step.

// errUnavailable marks an API call that could not dial the node (gRPC
// code Unavailable, "while dialing"); its text is the code's name, as
// apiErr wrote it before.
var errUnavailable = errors.New("Unavailable")

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
	d := c.p.reach.Probe(ctx, c.addr, func(ctx context.Context) error { return dialAny(ctx, eps) }, c.unreachableSay())
	if !d.HasErrors() {
		// The node answers: a dial refused before it did (its VM not
		// up yet) must not fail the step's calls from gRPC's backoff.
		settle(ctx, cl)
	}
	return d
}

// dialAny dials the endpoints: nil once one accepts a connection.
func dialAny(ctx context.Context, eps []string) error {
	var errs []error
	for _, e := range eps {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", dialAddress(e))
		if err == nil {
			conn.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unreachable is the diagnostic of a call of the step that could not
// reach the node (err wraps errUnavailable), nil for any other error.
func (c *call) unreachable(err error) phases.Diagnostics {
	if !errors.Is(err, errUnavailable) {
		return nil
	}
	return c.p.reach.Lost(c.addr, err, c.unreachableSay())
}

// unreachableSay words the diagnostics of the step when its endpoints do
// not answer.
func (c *call) unreachableSay() sdk.Unreachable {
	return sdk.Unreachable{
		First: func(err error) phases.Diagnostics {
			if c.mac != "" {
				return c.unreachableMAC(err)
			}
			return phases.Errorf("Cannot Reach Talos",
				"%s cannot reach the Talos API of node %s at %s: %v. The endpoint comes from %s. "+
					"Check that the node is up (booted, its Talos API listening on port %d: a VM still booting does not answer yet); "+
					"that the address is right (for a VM, the address its incus_instance step reports); "+
					"and that nothing between this machine and the node blocks the port.",
				c.addr, strings.Join(c.p.targets(), ", "), c.endpoints(), err, c.endpointSource(), constants.ApidPort)
		},
		Again: func(first phases.Address) phases.Diagnostics {
			return phases.Errorf("Cannot Reach Talos", "%s: the Talos API at %s did not answer (see %s).", c.addr, c.endpoints(), first)
		},
	}
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

// unreachableMAC is the first diagnostic of a step that expects the node
// at its address to be the VM of a MAC (talos_machine_config's mac):
// the address is the router's DHCP reservation for that MAC.
func (c *call) unreachableMAC(err error) phases.Diagnostics {
	return phases.Errorf("Cannot Reach Talos",
		"%s cannot reach the Talos API of node %s at %s: %v. The endpoint comes from %s, and the node there must be the VM whose NIC has MAC %s. "+
			"Check the router's DHCP reservation for %s (that it hands out %s to that MAC); that the VM has a NIC with hwaddr %s on the LAN bridge and is up (booted from the ISO, its Talos API listening on port %d: a VM still booting does not answer yet); "+
			"and that nothing between this machine and the node blocks the port.",
		c.addr, strings.Join(c.p.targets(), ", "), c.endpoints(), err, c.endpointSource(), c.mac, c.mac, strings.Join(c.p.targets(), ", "), c.mac, constants.ApidPort)
}

// answersSoon says whether any endpoint of the provider accepts a
// connection within a few seconds: asked by a plan made while a step it
// depends on still has to make or start the node, so that a node not
// booted yet is no error but a plan for later. It records nothing in the
// provider's reach (the run will find out).
func (c *call) answersSoon(ctx context.Context) bool {
	cl, err := c.p.conn(ctx)
	if err != nil || len(cl.GetEndpoints()) == 0 {
		return true // nothing to dial here: the step's own calls tell
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return dialAny(ctx, cl.GetEndpoints()) == nil
}

// awaitBoot waits up to wait for the endpoints to answer, as a node booted
// from the ISO does once up (its address leased by the router): nil when
// they do (or the wait is 0); otherwise the apply to return, stopped by
// the first Ctrl-C or failed after the wait with what to check.
func (c *call) awaitBoot(ctx context.Context, wait time.Duration) *mcApply {
	if c.answersSoon(ctx) || wait == 0 {
		return nil
	}
	c.log.Printf("waiting up to %s for the node at %s to answer (booting from the ISO)", wait, c.endpoints())
	wctx, release := c.WaitContext(ctx)
	defer release()
	wctx, cancel := context.WithTimeout(wctx, wait)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			if sdk.StopCut(wctx) {
				return &mcApply{Stopped: true, Diagnostics: sdk.StoppedWaiting(c.addr, "nothing was sent", "the node at "+c.endpoints())}
			}
			err := fmt.Errorf("nothing answered for %s", wait)
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			if c.mac != "" {
				return &mcApply{Diagnostics: c.unreachableMAC(err)}
			}
			return &mcApply{Diagnostics: c.unreachableSay().First(err)}
		case <-tick.C:
			if c.answersSoon(wctx) {
				return nil
			}
		}
	}
}
