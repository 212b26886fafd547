package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Bootstrap is the talos_bootstrap step type.
const Bootstrap = "talos_bootstrap"

// bootstrapAttrs is a talos_bootstrap step: no attributes.
type bootstrapAttrs struct{}

var bootstrapStep = &sdk.StepType[*Provider, bootstrapAttrs, none, none]{
	Name:        Bootstrap,
	Description: "Bootstraps etcd on the node, once; a node already bootstrapped counts as done. Cannot be undone.",
	Rollback:    "Cannot be undone.",
	Plan: func(_ context.Context, c *handle, _ bootstrapAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		return sdk.Plan[none]{
			Diff:         fmt.Sprintf("bootstrap etcd on %s (once; a node already bootstrapped counts as done; cannot be undone)", strings.Join(c.Settings.targets(), ", ")),
			Irreversible: "bootstrapping etcd cannot be undone",
		}
	},
	Apply: func(ctx context.Context, sc *handle, _ bootstrapAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
		d, stopped := applyBootstrap(ctx, newCall(sc))
		return sdk.Apply[none, none]{Outputs: none{}, Diagnostics: d, Stopped: stopped}
	},
}

// applyBootstrap bootstraps etcd and waits until it is healthy; stopped:
// a gentle stop cut the wait (etcd is bootstrapped, not waited for).
func applyBootstrap(ctx context.Context, c *call) (_ phases.Diagnostics, stopped bool) {
	ns, d := c.guarded(ctx)
	if d.HasErrors() {
		return d, false
	}
	n := ns[0] // etcd is bootstrapped on one node only
	bctx, cancel := bounded(ctx)
	defer cancel()
	err := n.c.Bootstrap(n.at(bctx), &machineapi.BootstrapRequest{})
	switch {
	case err == nil:
		c.log.Printf("node %s: etcd bootstrapped", n.name)
	case alreadyBootstrapped(err):
		c.log.Printf("node %s: already bootstrapped (%v); nothing to do", n.name, status.Convert(err).Message())
	default:
		c.captureDmesg(ctx, n)
		return phases.Errorf("Bootstrap Failed", "Bootstrapping etcd on node %s failed: %v.", n.name, apiErr("Bootstrap", err)), false
	}
	c.log.Printf("bootstrap cannot be undone: rollback leaves etcd as it is")
	return waitEtcd(ctx, c, n)
}

// waitEtcd waits, within the step's timeout (else serviceWait), until
// etcd runs healthy on the bootstrapped node, as talos_service_health
// does: etcd takes a while to start, and the next steps (the kubeconfig,
// the API server) need it. Only that node is asked: a worker has no etcd.
// A gentle stop ends the wait at once (stopped).
func waitEtcd(ctx context.Context, c *call, n node) (_ phases.Diagnostics, stopped bool) {
	parent := ctx
	ctx, cancel, wait := serviceDeadline(ctx)
	defer cancel()
	wctx, release := c.WaitContext(ctx)
	defer release()
	bad, err := c.waitServices(wctx, n, []string{"etcd"})
	switch {
	case err == nil && len(bad) == 0:
		c.log.Printf("node %s: etcd running and healthy", n.name)
		return nil, false
	case sdk.StopCut(wctx):
		seen := strings.Join(bad, "; ")
		if seen == "" {
			seen = "no answer yet"
		}
		c.log.Printf("node %s: stopped waiting for etcd (%s)", n.name, seen)
		return sdk.StoppedWaiting(c.addr, "etcd is bootstrapped on "+n.name, "etcd becoming healthy (last seen: "+seen+")"), true
	case errors.Is(parent.Err(), context.Canceled): // an interrupt, not the timeout
		return phases.Errorf("Etcd Not Healthy", "Stopped while waiting for etcd on %s after the bootstrap: %v. The next run finds the node bootstrapped and waits again.", n.name, parent.Err()), false
	case len(bad) == 0:
		return phases.Errorf("Etcd Not Healthy", "Node %s did not say whether etcd is healthy after the bootstrap: %v.", n.name, apiErr("ServiceList", err)), false
	}
	c.captureDmesg(ctx, n)
	return phases.Errorf("Etcd Not Healthy", "etcd is bootstrapped on %s but not healthy after waiting %s: %s. The next run finds the node bootstrapped and waits again.", n.name, wait, strings.Join(bad, "; ")), false
}

func alreadyBootstrapped(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	msg := strings.ToLower(st.Message())
	return st.Code() == codes.AlreadyExists ||
		(st.Code() == codes.FailedPrecondition && (strings.Contains(msg, "not empty") || strings.Contains(msg, "already")))
}
