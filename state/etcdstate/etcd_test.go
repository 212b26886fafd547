package etcdstate_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
	"github.com/homelab-migrate/migrate/state/statetest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// backend is a statetest.Backend at cfg.
func backend(t *testing.T, c *etcdtest.Cluster, cfg etcdstate.Config) statetest.Backend {
	ctx := context.Background()
	cli := c.Client()
	return statetest.Backend{
		Open: func(opts state.Options) (statetest.Store, error) {
			s, err := etcdstate.Open(ctx, cfg, opts)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { s.Close() })
			return s, nil
		},
		ReadLock: func() (*state.LockInfo, error) { return etcdstate.ReadLock(ctx, cfg) },
		Unlock:   func(id string) error { return etcdstate.Unlock(ctx, cfg, id) },
		Dump:     func() map[string]string { return dump(t, cli, cfg.Prefix) },
	}
}

func dump(t testing.TB, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m
}

// prefixed is c's config with a prefix of t's own.
func prefixed(t *testing.T, c *etcdtest.Cluster) etcdstate.Config {
	cfg := c.Config()
	cfg.Prefix = "migrate/" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "/"
	return cfg
}

func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	statetest.Run(t, func(t *testing.T) statetest.Backend { return backend(t, c, prefixed(t, c)) })
}

// TestThreeMembersTLSAuth: the suite on three members, with TLS (client
// certificates) and authentication; then the errors a user meets there.
func TestThreeMembersTLSAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: true, Auth: true})
	statetest.Run(t, func(t *testing.T) statetest.Backend { return backend(t, c, prefixed(t, c)) })
	ctx := context.Background()

	t.Run("WrongPassword", func(t *testing.T) {
		cfg := prefixed(t, c)
		cfg.Password = "not-the-password"
		_, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
		if err == nil || !strings.Contains(err.Error(), `authentication failed for user "migrate"`) {
			t.Fatalf("Open with a wrong password: %v", err)
		}
		if strings.Contains(err.Error(), cfg.Password) || strings.Contains(err.Error(), etcdtest.Password) {
			t.Fatalf("the error shows a password: %v", err)
		}
	})
	t.Run("NoCredentials", func(t *testing.T) {
		cfg := prefixed(t, c)
		cfg.Username, cfg.Password = "", ""
		_, err := etcdstate.Open(ctx, cfg, state.Options{})
		if err == nil || !strings.Contains(err.Error(), "requires authentication") {
			t.Fatalf("Open without credentials: %v", err)
		}
	})
	t.Run("PrefixNotAllowed", func(t *testing.T) {
		cfg := prefixed(t, c)
		cfg.Prefix = "elsewhere/"
		_, err := etcdstate.Open(ctx, cfg, state.Options{})
		if err == nil || !strings.Contains(err.Error(), "may not read or write") {
			t.Fatalf("Open of a prefix the user may not use: %v", err)
		}
	})
	t.Run("TLSMismatch", func(t *testing.T) {
		cfg := prefixed(t, c)
		cfg.CA = etcdtest.ForeignCA(t)
		start := time.Now()
		_, err := etcdstate.Open(ctx, cfg, state.Options{})
		if err == nil || !strings.Contains(err.Error(), "TLS handshake failed") || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("Open with another CA: %v", err)
		}
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	})
	t.Run("PlainClientToTLS", func(t *testing.T) {
		cfg := prefixed(t, c)
		cfg.CA, cfg.Cert, cfg.Key = "", "", ""
		cfg.Insecure = true // the password would be refused before the probe
		for i, ep := range cfg.Endpoints {
			cfg.Endpoints[i] = strings.TrimPrefix(ep, "https://")
		}
		_, err := etcdstate.Open(ctx, cfg, state.Options{})
		if err == nil || !strings.Contains(err.Error(), "speaks TLS: set ca") {
			t.Fatalf("Open without TLS: %v", err)
		}
	})
}

func TestTwoWritersAndExpiredHolder(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	cfg.LockTTL = 3 * time.Second
	ctx := context.Background()
	holder, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run --all"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		statetest.Checkpoint(t, holder, statetest.Rec(fmt.Sprintf("exec.s%d", i), state.Done))
	}
	statetest.Checkpoint(t, holder, statetest.Rec("exec.s5", state.Running))
	// The holder dies: nothing persisted, its lease no longer renewed.
	etcdstate.Crash(holder)
	_, err = etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	var le *state.LockedError
	if !errors.As(err, &le) || le.Holder.Command != "migrate run --all" {
		t.Fatalf("Open while the dead holder's lease runs: %v, want a LockedError naming it", err)
	}
	// Its lease expires: the next writer gets the lock and every
	// checkpoint.
	deadline := time.Now().Add(60 * time.Second)
	var next *etcdstate.Store
	for {
		next, err = etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
		if err == nil {
			break
		}
		if !errors.As(err, &le) || time.Now().After(deadline) {
			t.Fatalf("Open after the holder died: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer next.Close()
	s := next.Snapshot()
	if s.Serial != 6 || len(s.Steps) != 6 || s.Steps["exec.s5"].Status != state.Running {
		t.Fatalf("after the holder died: serial %d, %d steps", s.Serial, len(s.Steps))
	}
}

// TestLostLease: a holder whose lock is gone (removed by migrate state
// unlock, or its lease revoked) hears it at once (Lost, LostCause saying
// why) and, as nobody took the lock and nothing was written since, takes
// it again under a new lease, so that what it cut off can be recorded;
// one whose lock another process took gets ErrLockLost, saying why, from
// every later write.
func TestLostLease(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	cli := c.Client()
	lockOf := func(t *testing.T, cfg etcdstate.Config) *mvccpb.KeyValue {
		t.Helper()
		resp, err := cli.Get(ctx, cfg.Prefix+"lock")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("lock key: %v", err)
		}
		return resp.Kvs[0]
	}
	for _, how := range []string{"unlock", "revoke", "taken"} {
		t.Run(how, func(t *testing.T) {
			cfg := prefixed(t, c)
			holder, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
			if err != nil {
				t.Fatal(err)
			}
			statetest.Checkpoint(t, holder, statetest.Rec("exec.a", state.Done))
			lease := lockOf(t, cfg).Lease
			switch how {
			case "unlock":
				if err := etcdstate.Unlock(ctx, cfg, holder.LockInfo().ID); err != nil {
					t.Fatal(err)
				}
			case "revoke":
				if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
					t.Fatal(err)
				}
			case "taken":
				other, err := cli.Grant(ctx, 60)
				if err != nil {
					t.Fatal(err)
				}
				info := `{"id":"other","pid":4242,"host":"elsewhere","user":"bob","command":"migrate run","created":"2026-01-01T00:00:00Z"}`
				if _, err := cli.Put(ctx, cfg.Prefix+"lock", info, clientv3.WithLease(other.ID)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-holder.Lost():
			case <-time.After(30 * time.Second):
				t.Fatal("the holder was not told its lock was lost")
			}
			if err := holder.LostCause(); !errors.Is(err, etcdstate.ErrLockLost) {
				t.Fatalf("LostCause: %v", err)
			}
			t.Log(holder.LostCause())
			err = holder.Checkpoint(statetest.Rec("exec.b", state.Failed))
			if how == "taken" {
				if !errors.Is(err, etcdstate.ErrLockLost) || !strings.Contains(err.Error(), "another process took the lock") {
					t.Fatalf("Checkpoint after another took the lock: %v, want ErrLockLost", err)
				}
				if err := holder.CheckpointUnsynced(statetest.Rec("exec.c", state.Running)); !errors.Is(err, etcdstate.ErrLockLost) {
					t.Fatalf("Record after the lock was lost: %v", err)
				}
				holder.Close()
				if kv := lockOf(t, cfg); !strings.Contains(string(kv.Value), `"other"`) {
					t.Fatalf("the lost holder's Close changed the other's lock: %s", kv.Value)
				}
				return
			}
			if err != nil {
				t.Fatalf("Checkpoint once the lock was taken again: %v", err)
			}
			if kv := lockOf(t, cfg); kv.Lease == lease || !strings.Contains(string(kv.Value), holder.LockInfo().ID) {
				t.Fatalf("the lock was not taken again under a new lease: lease %x (was %x), %s", kv.Lease, lease, kv.Value)
			}
			holder.Close()
			// Another writer takes over with what was committed.
			w, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if s := w.Snapshot(); s.Serial != 2 || len(s.Steps) != 2 || s.Steps["exec.b"].Status != state.Failed {
				t.Fatalf("after the lost holder: serial %d, %d steps", s.Serial, len(s.Steps))
			}
		})
	}
}

// TestRunningElsewhere: a step recorded running under a lease that still
// lives (its holder frozen, its lock key deleted by hand) is running
// elsewhere for the next holder, naming the first; once that lease is
// revoked, or for a record without one, it is not.
func TestRunningElsewhere(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	cli := c.Client()
	cfg := prefixed(t, c)
	cfg.LockTTL = time.Minute
	first, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	statetest.Checkpoint(t, first, statetest.Rec("exec.a", state.Running))
	rec, _ := first.Step(statetest.Rec("exec.a", state.Running).Addr)
	if rec.Holder == nil || rec.Holder.Lease == 0 || rec.Holder.LockID != first.LockInfo().ID {
		t.Fatalf("the running record does not name its holder and lease: %+v", rec.Holder)
	}
	etcdstate.Crash(first) // its lease lives on, for a minute
	if _, err := cli.Delete(ctx, cfg.Prefix+"lock"); err != nil {
		t.Fatal(err)
	}
	next, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	err = next.RunningElsewhere(ctx, rec)
	if err == nil || !strings.Contains(err.Error(), "exec.a may still be running elsewhere") || !strings.Contains(err.Error(), first.LockInfo().ID) {
		t.Fatalf("RunningElsewhere under a live lease: %v", err)
	}
	t.Log(err)
	if err := next.RunningElsewhere(ctx, &state.StepRecord{Addr: rec.Addr, Status: state.Running}); err != nil {
		t.Fatalf("RunningElsewhere without a holder: %v", err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(rec.Holder.Lease)); err != nil {
		t.Fatal(err)
	}
	if err := next.RunningElsewhere(ctx, rec); err != nil {
		t.Fatalf("RunningElsewhere once the lease is revoked: %v", err)
	}
}

// checkpointer checkpoints in the background until stopped, counting.
type checkpointer struct {
	s      *etcdstate.Store
	n      atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	err    error
	slowst time.Duration
}

func startCheckpoints(s *etcdstate.Store) *checkpointer {
	c := &checkpointer{s: s, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for i := 0; ; i++ {
			select {
			case <-c.stop:
				return
			default:
			}
			start := time.Now()
			if err := s.Checkpoint(statetest.Rec(fmt.Sprintf("exec.s%d", i%50), state.Done)); err != nil {
				c.err = err
				return
			}
			c.slowst = max(c.slowst, time.Since(start))
			c.n.Add(1)
		}
	}()
	return c
}

// waitCount waits until more than n checkpoints are done.
func (c *checkpointer) waitCount(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for c.n.Load() <= n {
		select {
		case <-c.done:
			t.Fatalf("checkpoints stopped after %d: %v", c.n.Load(), c.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint past %d within 60s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMemberKilledAndRestarted(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cfg := prefixed(t, c)
	s, err := etcdstate.Open(context.Background(), cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	run := startCheckpoints(s)
	for i := range 3 {
		run.waitCount(t, run.n.Load()+20)
		c.Kill(i)
		run.waitCount(t, run.n.Load()+20)
		c.Restart(i)
		c.WaitReady(i)
	}
	run.waitCount(t, run.n.Load()+20)
	close(run.stop)
	<-run.done
	if run.err != nil {
		t.Fatal(run.err)
	}
	t.Logf("%d checkpoints while each member was killed and restarted in turn; slowest %v", run.n.Load(), run.slowst)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := etcdstate.Open(context.Background(), cfg, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Snapshot().Serial; got != uint64(run.n.Load()) {
		t.Fatalf("serial %d, want %d checkpoints", got, run.n.Load())
	}
}

func TestQuorumLost(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cfg := prefixed(t, c)
	cfg.DialTimeout = 2 * time.Second // requests wait 4s
	s, err := etcdstate.Open(context.Background(), cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	statetest.Checkpoint(t, s, statetest.Rec("exec.a", state.Done), statetest.Rec("exec.b", state.Running))
	c.Kill(1)
	c.Kill(2)
	err = s.Checkpoint(statetest.Rec("exec.b", state.Done))
	if err == nil || !strings.Contains(err.Error(), "no quorum") || !strings.Contains(err.Error(), cfg.Endpoints[0]) {
		t.Fatalf("Checkpoint without quorum: %v, want an error saying so and naming the endpoints", err)
	}
	t.Log(err)
	_, err = etcdstate.Open(context.Background(), cfg, state.Options{})
	if err == nil || !strings.Contains(err.Error(), "quorum") || !strings.Contains(err.Error(), cfg.Endpoints[1]+", "+cfg.Endpoints[2]+": connect: connection refused") {
		t.Fatalf("Open without quorum: %v, want an error saying so and naming the endpoints down", err)
	}
	t.Log(err)
	if got := s.Snapshot(); got.Serial != 2 || got.Steps["exec.b"].Status != state.Running {
		t.Fatalf("a failed checkpoint shows in the state: serial %d", got.Serial)
	}
	c.Restart(1)
	c.Restart(2)
	c.WaitReady(1)
	c.WaitReady(2)
	// The same holder goes on once the quorum is back.
	statetest.Checkpoint(t, s, statetest.Rec("exec.c", state.Done))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := etcdstate.Open(context.Background(), cfg, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Snapshot()
	// The unconfirmed checkpoint may or may not have been committed;
	// everything confirmed is there, in order.
	if got.Steps["exec.a"].Status != state.Done || got.Steps["exec.c"].Status != state.Done || got.Serial < 3 || got.Serial > 4 {
		t.Fatalf("after the quorum came back: serial %d, steps %v", got.Serial, got.Steps)
	}
}

func Test10000Steps(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	ctx := context.Background()
	s, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	const steps, workers = 10000, 32
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < steps; i += workers {
				r := statetest.Rec(fmt.Sprintf("exec.step_%05d", i), state.Done)
				r.InputHash = strings.Repeat("ab", 32)
				if err := s.Checkpoint(r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	took := time.Since(start)
	pstart := time.Now()
	if err := s.Persist(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d checkpoints in %v (%d transactions), Persist %v", steps, took.Round(time.Millisecond), etcdstate.Txns(s), time.Since(pstart).Round(time.Millisecond))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// No value grows with the number of steps: the snapshot is in chunks.
	chunks := 0
	for k, v := range dump(t, c.Client(), cfg.Prefix) {
		if len(v) > 512<<10 {
			t.Errorf("%s is %d bytes", k, len(v))
		}
		if strings.HasPrefix(k, cfg.Prefix+"snapshot/") && k != cfg.Prefix+"snapshot/meta" {
			chunks++
		}
	}
	if chunks < 3 {
		t.Errorf("the snapshot of %d steps is in %d chunks", steps, chunks)
	}
	rstart := time.Now()
	r, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := r.Snapshot()
	t.Logf("reopened in %v", time.Since(rstart).Round(time.Millisecond))
	if got.Serial != steps || len(got.Steps) != steps {
		t.Fatalf("reopened: serial %d, %d steps; want %d", got.Serial, len(got.Steps), steps)
	}
	// And a checkpoint after it is one small write.
	statetest.Checkpoint(t, r, statetest.Rec("exec.step_00000", state.Reverted))
}

func TestClearErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("Validate", func(t *testing.T) {
		for _, tc := range []struct {
			cfg  etcdstate.Config
			want string
		}{
			{etcdstate.Config{Prefix: "m/"}, "no endpoints"},
			{etcdstate.Config{Endpoints: []string{"127.0.0.1:2379"}}, "set a prefix"},
			{etcdstate.Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "m/", Cert: "c.pem"}, "cert and key go together"},
			{etcdstate.Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "m/", Username: "u"}, "username and password go together"},
			{etcdstate.Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "m/", LockTTL: time.Second}, "at least 2s"},
		} {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate(%+v): %v, want %q", tc.cfg, err, tc.want)
			}
			if _, err := etcdstate.Open(ctx, tc.cfg, state.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%+v): %v, want %q", tc.cfg, err, tc.want)
			}
		}
	})
	t.Run("PasswordNeverPrinted", func(t *testing.T) {
		cfg := etcdstate.Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "m/", Username: "u", Password: "hunter2-canary"}
		for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
			if out := fmt.Sprintf(f, cfg); strings.Contains(out, "hunter2-canary") || !strings.Contains(out, "(sensitive)") {
				t.Errorf("%s of a Config: %s", f, out)
			}
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		var eps []string
		for range 2 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, l.Addr().String())
			l.Close() // nothing listens there now
		}
		cfg := etcdstate.Config{Endpoints: eps, Prefix: "migrate/x/", DialTimeout: time.Second}
		start := time.Now()
		_, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
		if err == nil || !strings.Contains(err.Error(), "tried "+eps[0]+", "+eps[1]+": connect: connection refused") {
			t.Fatalf("Open of unreachable endpoints: %v", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("took %v", d)
		}
		if _, err := etcdstate.ReadLock(ctx, cfg); err == nil || !strings.Contains(err.Error(), eps[1]) {
			t.Fatalf("ReadLock of unreachable endpoints: %v", err)
		}
	})
	t.Run("ForeignKeys", func(t *testing.T) {
		c := etcdtest.Start(t, etcdtest.Options{Members: 1})
		cfg := prefixed(t, c)
		if _, err := c.Client().Put(ctx, cfg.Prefix+"registry/pods/default/web", "{}"); err != nil {
			t.Fatal(err)
		}
		before := dump(t, c.Client(), cfg.Prefix)
		for _, opts := range []state.Options{{}, statetest.Writer("migrate run")} {
			_, err := etcdstate.Open(ctx, cfg, opts)
			if err == nil || !strings.Contains(err.Error(), "keys migrate did not write ("+cfg.Prefix+"registry/pods/default/web") {
				t.Fatalf("Open of a prefix holding something else: %v", err)
			}
		}
		after := dump(t, c.Client(), cfg.Prefix)
		if len(after) != len(before) {
			t.Fatalf("a refused Open wrote: %v", after)
		}
		if info, err := etcdstate.ReadLock(ctx, cfg); info != nil || err != nil {
			t.Fatalf("a refused Open left its lock: %v %v", info, err)
		}
	})
}

// TestDamageRefused: a damaged chunk or journal entry is refused, naming
// its key, and left as it is.
func TestDamageRefused(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	cli := c.Client()
	for _, what := range []string{"snapshot/", "journal/"} {
		t.Run(strings.TrimSuffix(what, "/"), func(t *testing.T) {
			cfg := prefixed(t, c)
			cfg.LockTTL = 2 * time.Second
			s, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
			if err != nil {
				t.Fatal(err)
			}
			statetest.Checkpoint(t, s, statetest.Rec("exec.a", state.Done))
			if what == "journal/" {
				etcdstate.Crash(s) // the entry stays in the journal
			} else {
				s.Close()
			}
			var key string
			for k := range dump(t, cli, cfg.Prefix) {
				if strings.HasPrefix(k, cfg.Prefix+what) && k != cfg.Prefix+"snapshot/meta" {
					key = k
				}
			}
			v := dump(t, cli, cfg.Prefix)[key]
			i := strings.Index(v, "exec.a") + 5
			damaged := v[:i] + "b" + v[i+1:]
			if _, err := cli.Put(ctx, key, damaged); err != nil {
				t.Fatal(err)
			}
			before := dump(t, cli, cfg.Prefix)
			for _, opts := range []state.Options{{}, statetest.Writer("migrate run")} {
				var deadline = time.Now().Add(60 * time.Second)
				for {
					_, err = etcdstate.Open(ctx, cfg, opts)
					var le *state.LockedError
					if !errors.As(err, &le) || time.Now().After(deadline) {
						break // the crashed holder's lease expired
					}
					time.Sleep(200 * time.Millisecond)
				}
				var ue *state.UnusableError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), key[:strings.LastIndex(key, "/")]) {
					t.Fatalf("Open of a damaged %s: %v, want an UnusableError naming %s", what, err, key)
				}
			}
			t.Log(err)
			after := dump(t, cli, cfg.Prefix)
			delete(after, cfg.Prefix+"lock")
			delete(before, cfg.Prefix+"lock")
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatal("a refused Open changed the state")
			}
		})
	}
}
