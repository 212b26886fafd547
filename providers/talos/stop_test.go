package talos_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// TestBootstrapWaitStopped: a gentle stop (the request's Stop closed)
// while the bootstrap waits for etcd ends the wait at once: the node is
// bootstrapped, the answer says Stopped and what was not waited for (the
// next run finds the node bootstrapped and waits again, as
// TestBootstrapWaitTimesOut shows).
func TestBootstrapWaitStopped(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.3", EtcdStartup: 10 * time.Minute})
	p := l.provider(t, nil)
	stop := make(chan struct{})
	done := make(chan providers.ApplyResponse, 1)
	var log bytes.Buffer
	go func() {
		done <- p.Apply(context.Background(), providers.ApplyRequest{Type: talos.Bootstrap, Addr: phases.Address{Type: talos.Bootstrap, Name: "node"},
			Config: cty.EmptyObjectVal, Log: &log, Stop: stop})
	}()
	for deadline := time.Now().Add(30 * time.Second); !l.n.Bootstrapped(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node was not bootstrapped")
		}
	}
	time.Sleep(500 * time.Millisecond) // into the wait for etcd
	at := time.Now()
	close(stop)
	var r providers.ApplyResponse
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("closing Stop did not end the wait for etcd")
	}
	t.Logf("the wait for etcd ended %s after the stop", time.Since(at).Round(time.Microsecond))
	if took := time.Since(at); took > 2*time.Second {
		t.Errorf("the wait for etcd ended %s after the stop, want at once", took)
	}
	if err := r.Diagnostics.Err(); !r.Stopped || err == nil || !strings.Contains(err.Error(), "Stopped While Waiting") ||
		!strings.Contains(err.Error(), "etcd is bootstrapped on") || !strings.Contains(err.Error(), "etcd becoming healthy (last seen: etcd: Preparing") {
		t.Errorf("a stopped bootstrap answered Stopped=%v %v", r.Stopped, err)
	}
	if !strings.Contains(log.String(), "etcd bootstrapped") || !strings.Contains(log.String(), "stopped waiting for etcd") {
		t.Errorf("the log:\n%s", log.String())
	}
}
