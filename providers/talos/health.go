package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// ServiceHealth is the talos_service_health step type.
const ServiceHealth = "talos_service_health"

// healthAttrs is a talos_service_health step.
type healthAttrs struct {
	Services []string `cty:"services" required:"true" doc:"Service IDs, such as [\"etcd\", \"kubelet\"]."`
}

var serviceHealthStep = &sdk.StepType[*Provider, healthAttrs, none, none]{
	Name:        ServiceHealth,
	Description: "Checks that Talos services are running and healthy.",
	Rollback:    "Nothing to undo.",
	CanCheck:    true,
	WaitsOnly:   true,
	Unknowns:    true, // the plan says what it will check when known
	Plan: func(_ context.Context, c *handle, a healthAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		if c.Unknown("services") {
			return sdk.Plan[none]{Diff: "check that Talos services are running and healthy (which ones is known after earlier steps run)"}
		}
		if len(a.Services) == 0 {
			return sdk.Plan[none]{Diagnostics: missing(c, "services")}
		}
		return sdk.Plan[none]{Diff: fmt.Sprintf("check that %s run healthy on %s", strings.Join(a.Services, ", "), strings.Join(c.Settings.targets(), ", "))}
	},
	Apply: func(ctx context.Context, sc *handle, a healthAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		if len(a.Services) == 0 {
			return sdk.Apply[none, none]{Diagnostics: missing(sc, "services")}
		}
		if d := serviceHealth(ctx, newCall(sc), a.Services); d.HasErrors() {
			return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d}
		}
		return sdk.Apply[none, none]{Outputs: none{}, Revert: nothingToUndo()}
	},
}

// serviceWait is how long talos_service_health waits for its services when
// the step sets no timeout, as talosctl health --wait-timeout: right after
// a bootstrap or a reboot, etcd and the kubelet take a while to start.
const serviceWait = 5 * time.Minute

// serviceDeadline gives ctx the default wait unless it has a deadline
// already (the step's timeout), and says how long that is.
func serviceDeadline(ctx context.Context) (context.Context, context.CancelFunc, time.Duration) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, serviceWait)
	}
	deadline, _ := ctx.Deadline()
	return ctx, cancel, time.Until(deadline).Round(time.Second)
}

func serviceHealth(ctx context.Context, c *call, svcs []string) phases.Diagnostics {
	p := c.p
	parent := ctx
	ctx, cancel, wait := serviceDeadline(ctx)
	defer cancel()
	err := p.forNodes(ctx, func(n node) error {
		bad, err := c.waitServices(ctx, n, svcs)
		switch {
		case err == nil && len(bad) == 0:
			c.log.Printf("node %s: %s running and healthy", n.name, strings.Join(svcs, ", "))
			return nil
		case errors.Is(parent.Err(), context.Canceled): // not the timeout: an interrupt
			return fmt.Errorf("stopped while waiting for the services of %s: %w", n.name, parent.Err())
		}
		c.captureDmesg(ctx, n)
		if len(bad) == 0 {
			return err // the node never answered
		}
		return fmt.Errorf("services not healthy on %s after waiting %s: %s", n.name, wait, strings.Join(bad, "; "))
	})
	if d := c.unreachable(err); d != nil {
		return d // the node never answered within the wait
	}
	if err != nil {
		return phases.Errorf("Services Not Healthy", "%v.", err)
	}
	return nil
}

// waitServices asks the node for its services until the wanted ones run
// healthy or ctx ends. It returns the last states seen of those that did
// not (empty when all are well), and the last error when the node did not
// answer.
func (c *call) waitServices(ctx context.Context, n node, want []string) ([]string, error) {
	var bad []string
	var lastErr error
	said := ""
	for {
		have, err := n.services(ctx)
		switch {
		case err == nil:
			bad, lastErr = unhealthy(have, want), nil
			if len(bad) == 0 {
				return nil, nil
			}
			if now := strings.Join(bad, "; "); now != said {
				c.log.Printf("node %s: waiting for %s", n.name, now)
				said = now
			}
		case ctx.Err() == nil:
			lastErr = err // cut by our own deadline is not the node's answer
		}
		select {
		case <-ctx.Done():
			if lastErr == nil && bad == nil {
				lastErr = ctx.Err()
			}
			return bad, lastErr
		case <-time.After(pollInterval):
		}
	}
}
