package state

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkCheckpoint measures one durable checkpoint (a journal append and
// an fdatasync) in a state that already holds 100 or 10,000 records: the
// cost must not grow with the size of the state.
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run("steps="+strconv.Itoa(n), func(b *testing.B) {
			l := openW(b, newStateDir(b, 0, n))
			defer l.Close()
			r := rec("exec.s0", Done)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r.Addr.Name = "s" + strconv.Itoa(i%n)
				r.Attempts = i
				if err := l.Checkpoint(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckpointParallel runs checkpoints from 10 goroutines per CPU,
// as parallel steps do: group commit shares the syncs (syncs/op < 1).
func BenchmarkCheckpointParallel(b *testing.B) {
	l := openW(b, newStateDir(b, 0, 100))
	defer l.Close()
	var next atomic.Int64
	b.SetParallelism(10)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rec("exec.w"+strconv.FormatInt(next.Add(1), 10), Running)
		for pb.Next() {
			r.Attempts++
			if err := l.Checkpoint(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	l.mu.Lock()
	b.ReportMetric(float64(l.syncs)/float64(b.N), "syncs/op")
	l.mu.Unlock()
}

// BenchmarkCheckpoint10000 is the target: 10,000 sequential
// checkpoints into a new state, then Persist, in well under 3 s.
func BenchmarkCheckpoint10000(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		b.StartTimer()
		l := openW(b, dir)
		for i := range 10000 {
			if err := l.Checkpoint(rec("wait.w"+strconv.Itoa(i), Done)); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
