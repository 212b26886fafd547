package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TestWaitContext: a wait's context ends when Stop closes, saying so
// (StopCut), and not otherwise; without Stop it is the context itself.
func TestWaitContext(t *testing.T) {
	bg := context.Background()
	if ctx, release := (&sdk.Call[int]{}).WaitContext(bg); ctx != bg {
		t.Error("without Stop, WaitContext made a new context")
	} else {
		release()
	}

	stop := make(chan struct{})
	ctx, release := (&sdk.Call[int]{Stop: stop}).WaitContext(bg)
	defer release()
	close(stop)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("closing Stop did not end the wait's context")
	}
	if !sdk.StopCut(ctx) {
		t.Errorf("StopCut is false for a context Stop ended (cause %v)", context.Cause(ctx))
	}

	ctx, release = (&sdk.Call[int]{Stop: make(chan struct{})}).WaitContext(bg)
	release()
	if ctx.Err() == nil || sdk.StopCut(ctx) {
		t.Errorf("released without a stop: err %v, StopCut %v", ctx.Err(), sdk.StopCut(ctx))
	}
}
