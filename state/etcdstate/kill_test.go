package etcdstate_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
	"github.com/homelab-migrate/migrate/state/statetest"
)

const holderEnv = "ETCDSTATE_TEST_HOLDER"

// TestMain makes the test binary the holder process of TestHolderKilled
// when asked to.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(holderEnv); cfg != "" {
		holder(cfg)
		return
	}
	os.Exit(m.Run())
}

// holder takes the lock, checkpoints five steps, says so, and waits to be
// killed.
func holder(cfgJSON string) {
	var cfg etcdstate.Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		panic(err)
	}
	s, err := etcdstate.Open(context.Background(), cfg, statetest.Writer("migrate run --all"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for i := range 5 {
		if err := s.Checkpoint(statetest.Rec(fmt.Sprintf("exec.s%d", i), state.Done)); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	select {}
}

// TestHolderKilled: a holder process killed with SIGKILL keeps others out
// until its lease expires; then the next writer gets every checkpoint.
func TestHolderKilled(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	cfg.LockTTL = 3 * time.Second
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(b))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("holder: %q", line)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	ctx := context.Background()
	_, err = etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	var le *state.LockedError
	if !errors.As(err, &le) || le.Holder.PID != cmd.Process.Pid {
		t.Fatalf("Open right after the kill: %v, want a LockedError naming pid %d", err, cmd.Process.Pid)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
		if err == nil {
			if got := s.Snapshot(); got.Serial != 5 || len(got.Steps) != 5 {
				t.Fatalf("after the holder was killed: serial %d, %d steps", got.Serial, len(got.Steps))
			}
			s.Close()
			return
		}
		if !errors.As(err, &le) || time.Now().After(deadline) {
			t.Fatalf("Open after the holder was killed: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRacingWriters: of writers opening at the same moment, one gets the
// lock and the others fail naming it.
func TestRacingWriters(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	const n = 8
	var wg sync.WaitGroup
	stores := make([]*etcdstate.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = etcdstate.Open(context.Background(), cfg, statetest.Writer(fmt.Sprintf("migrate run #%d", i)))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, s := range stores {
		if s != nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both hold the lock", winner, i)
			}
			winner = i
			defer s.Close()
		}
	}
	if winner < 0 {
		t.Fatalf("no writer got the lock: %v", errs)
	}
	for i, err := range errs {
		var le *state.LockedError
		if i != winner && (!errors.As(err, &le) || !strings.Contains(err.Error(), fmt.Sprintf("migrate run #%d", winner))) {
			t.Errorf("writer %d: %v, want a LockedError naming writer %d", i, err, winner)
		}
	}
}
