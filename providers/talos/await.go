package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/connectivity"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// A node that does not answer yet. The client's gRPC channel dials the
// node at its first call; a dial refused (a VM not booted yet, a node
// rebooting) leaves the channel in its reconnect backoff, 0.8 s growing
// to 2 minutes, and every call during it fails at once with the dial's
// old "connection refused" though the node answers by then. So once the
// node answers TCP, the backoff is reset and the channel given a moment
// to connect (settle). And a step that knows its node may be rebooting
// (a resumed revert of an upgrade, the read of an upgrade a stopped run
// was applying) waits for it to answer (awaitAnswer) instead of failing.

// settleWait bounds the wait for the channel to connect once the node
// answers TCP.
const settleWait = 5 * time.Second

// settle resets the channel's reconnect backoff and waits, at most
// settleWait, until it is ready. A channel that fails again after the
// reset (a refused TLS handshake: the node in maintenance mode, another
// cluster's certificate) is not waited for: its calls say why.
func settle(ctx context.Context, cl *client.Client) {
	cc := cl.Conn()
	if cc == nil || cc.GetState() == connectivity.Ready {
		return
	}
	cc.ResetConnectBackoff()
	cc.Connect()
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	tried := false
	for {
		switch st := cc.GetState(); st {
		case connectivity.Ready, connectivity.Shutdown:
			return
		case connectivity.Connecting:
			tried = true
		case connectivity.TransientFailure:
			if tried {
				return
			}
		case connectivity.Idle:
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, cc.GetState()) {
			return
		}
	}
}

// Bounds of awaitAnswer: a resumed revert or an in-flight read waits as
// long as the upgrade's own wait for its reboot (rebootDeadline).
const (
	answerWait     = rebootDeadline
	answerLogEvery = 30 * time.Second
)

// awaitAnswer waits until every node of ns answers its version over
// mTLS, at most answerWait, saying in the step's log why (why: "the revert of
// the upgrade resumes") and, every answerLogEvery, that it still waits.
// Only a node that does not answer is waited for (a refused dial, a call
// that timed out): any other error is returned at once, as is the last
// one when answerWait passes, the context ends or the run is stopped.
func (c *call) awaitAnswer(ctx context.Context, ns []node, why string) error {
	wctx, release := c.WaitContext(ctx)
	defer release()
	wctx, cancel := context.WithTimeout(wctx, answerWait)
	defer cancel()
	start, logged := time.Now(), time.Time{}
	backoff := 250 * time.Millisecond
	for {
		var waiting []string
		var last error
		for _, n := range ns {
			err := c.answers(wctx, n)
			if err == nil {
				continue
			}
			if !silent(err) {
				return err
			}
			waiting, last = append(waiting, n.name), err
		}
		switch {
		case len(waiting) == 0:
			if !logged.IsZero() {
				c.log.Printf("node %s answers again (after %s)", strings.Join(nodeNames(ns), ", "), time.Since(start).Round(time.Second))
			}
			return nil
		case logged.IsZero():
			c.log.Printf("%s: waiting up to %s for node %s to answer (%v)", why, answerWait, strings.Join(waiting, ", "), last)
			logged = time.Now()
		case time.Since(logged) >= answerLogEvery:
			c.log.Printf("still waiting for node %s to answer (%s so far; %v)", strings.Join(waiting, ", "), time.Since(start).Round(time.Second), last)
			logged = time.Now()
		}
		select {
		case <-wctx.Done():
			if ctx.Err() == nil && wctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("node %s did not answer for %s: %w", strings.Join(waiting, ", "), answerWait, last)
			}
			return fmt.Errorf("%w while waiting for node %s to answer (last: %v)", context.Cause(wctx), strings.Join(waiting, ", "), last)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// answers asks the node its version, the channel settled first when the
// node answers TCP.
func (c *call) answers(ctx context.Context, n node) error {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := dialAny(dctx, n.c.GetEndpoints())
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %v", errUnavailable, err)
	}
	settle(ctx, n.c)
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = n.version(vctx)
	return err
}

// silent says whether err is a node that does not answer (a refused or
// failed dial, a call that timed out), not one that answers "no".
func silent(err error) bool {
	return errors.Is(err, errUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

func nodeNames(ns []node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.name
	}
	return out
}

// redial resets the channel's reconnect backoff, so that a wait for a
// rebooting node asks it at its own pace, not gRPC's (up to 2 minutes
// apart).
func (n node) redial() {
	if cc := n.c.Conn(); cc != nil {
		cc.ResetConnectBackoff()
	}
}

// readWhenItAnswers is the read of a done machine config whose node does
// not answer (err): rebooting, say, because a step after this one (an
// upgrade) was stopped while it rebooted the node. That is no error of
// the plan: the step stays as recorded (Unknown keeps a done step done),
// with a warning, and the steps that talk to the node next wait for it
// (an upgrade's in-flight read) or say it does not answer.
func (c *call) readWhenItAnswers(n node, err error) sdk.Read[machineConfigRevert] {
	return sdk.Read[machineConfigRevert]{Observation: providers.Unknown, Diagnostics: phases.Diagnostics{{
		Severity: phases.Warning,
		Summary:  "Node Not Answering",
		Detail: fmt.Sprintf("%s: node %s does not answer now (%v), so its config cannot be compared with the runbook's: the step stays as recorded. "+
			"A node rebooting (an upgrade a stopped run was applying) answers again in minutes; a node that stays down fails the next step that talks to it.", c.addr, n.name, err),
	}}}
}
