package backend

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
)

// TestEtcdDeferredAndCopy: on etcd, Begin refuses a state another writer
// changed since it was read (etcd does not ask Expect, Begin asks again),
// the locked state can lose its lock (state unlock ends its lease), and
// Copy pushes a local state into etcd.
func TestEtcdDeferredAndCopy(t *testing.T) {
	if _, err := etcdtest.Binary(); err != nil {
		t.Skip(err)
	}
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	b := New(&phases.BackendConfig{Type: "etcd", Endpoints: c.Endpoints(), Prefix: "migrate/" + t.Name() + "/"}, t.TempDir())
	if !strings.HasPrefix(b.Where(), "etcd "+c.Endpoints()[0]) {
		t.Errorf("Where: %s", b.Where())
	}

	// Push a local state into etcd.
	src := local(t.TempDir())
	snap := writeState(t, src.Dir, "exec.a")
	if _, err := Copy(ctx, src, b, locked(), false); err != nil {
		t.Fatal(err)
	}

	d, err := OpenDeferred(ctx, b, state.Options{MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Snapshot(); got.Lineage != snap.Lineage || len(got.Steps) != 1 {
		t.Fatalf("the pushed state reads %+v", got)
	}
	// Another writer meanwhile.
	w, err := b.Open(ctx, locked())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := phases.ParseAddress("exec.b")
	if err := w.Checkpoint(&state.StepRecord{Addr: a, Phase: "main", Status: state.Done, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Begin(ctx, locked(), "run", nil); err == nil || !strings.Contains(err.Error(), "changed while this run was being planned") {
		t.Errorf("Begin on an etcd state changed meanwhile: %v", err)
	}
	d.Close()

	d, err = OpenDeferred(ctx, b, state.Options{MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w, err = d.Begin(ctx, locked(), "run", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := w.(LosesLock)
	if !ok {
		t.Fatalf("an etcd state is not a LosesLock: %T", w)
	}
	if err := b.Unlock(ctx, w.LockInfo().ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
		if l.LostCause() == nil {
			t.Error("the lock was lost without a cause")
		}
	case <-time.After(30 * time.Second):
		t.Error("the lock broken by Unlock was not seen lost within 30s")
	}
}
