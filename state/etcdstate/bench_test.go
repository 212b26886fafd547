package etcdstate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
	"github.com/homelab-migrate/migrate/state/statetest"
)

// BenchmarkCheckpoint: one checkpoint after another on a three-member
// loopback cluster; p50 and p99 of their latency.
func BenchmarkCheckpoint(b *testing.B) {
	benchCheckpoints(b, 1)
}

// BenchmarkCheckpointParallel: 16 goroutines checkpointing at once (a
// wide DAG), sharing transactions.
func BenchmarkCheckpointParallel(b *testing.B) {
	benchCheckpoints(b, 16)
}

func benchCheckpoints(b *testing.B, workers int) {
	c := etcdtest.Start(b, etcdtest.Options{Members: 3})
	cfg := c.Config()
	s, err := etcdstate.Open(context.Background(), cfg, statetest.Writer("migrate bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	next := make(chan int)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				r := statetest.Rec(fmt.Sprintf("exec.s%d", i%400), state.Done)
				start := time.Now()
				if err := s.Checkpoint(r); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(start)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(etcdstate.Txns(s))/float64(b.N), "txns/op")
	}
}
