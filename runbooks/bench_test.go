package runbooks_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/homelab-migrate/migrate/runbooks"
)

// levels generates n exec steps in levels of width, each depending on every
// step of the level before (the shape of the engine benchmark).
func levels(n, width int) []byte {
	var b strings.Builder
	b.WriteString("phase \"bench\" {\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  step \"exec\" \"s%d\" {\n    command = [\"true\"]\n", i)
		if l := i / width; l > 0 {
			b.WriteString("    depends_on = [")
			for j := (l - 1) * width; j < l*width; j++ {
				fmt.Fprintf(&b, "exec.s%d, ", j)
			}
			b.WriteString("]\n")
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return []byte(b.String())
}

func BenchmarkLoad5000(b *testing.B) {
	fsys := fstest.MapFS{"main.hcl": {Data: levels(5000, 10)}}
	opts := runbooks.Options{Dir: "/x", Schemas: testSchemas()}
	b.ReportAllocs()
	for b.Loop() {
		rb, diags := runbooks.NewLoader(fsys, opts).Load()
		if diags.HasErrors() || len(rb.Phases[0].Steps) != 5000 {
			b.Fatal(diags.Err())
		}
	}
}

// TestConcurrentEvaluate: the engine evaluates steps in parallel.
func TestConcurrentEvaluate(t *testing.T) {
	t.Parallel()
	rb := mustLoad(t, map[string]string{"main.hcl": outputsRunbook}, runbooks.Options{})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range rb.AllSteps() {
				if _, d := s.Config.Evaluate(nil); d.HasErrors() {
					t.Error(d.Err())
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkLoad400 is the runbook of the engine-overhead benchmark.
func BenchmarkLoad400(b *testing.B) {
	fsys := fstest.MapFS{"main.hcl": {Data: levels(400, 10)}}
	opts := runbooks.Options{Dir: "/x", Schemas: testSchemas()}
	b.ReportAllocs()
	for b.Loop() {
		rb, diags := runbooks.NewLoader(fsys, opts).Load()
		if diags.HasErrors() || len(rb.Phases[0].Steps) != 400 {
			b.Fatal(diags.Err())
		}
	}
}

// chain generates n phases, each after the one before and with a step
// that depends on the step of the phase before.
func chain(n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "phase \"p%d\" {\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "  after = [phase.p%d]\n", i-1)
		}
		fmt.Fprintf(&b, "  step \"exec\" \"s%d\" {\n    command = [\"true\"]\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "    depends_on = [exec.s%d]\n", i-1)
		}
		b.WriteString("  }\n}\n")
	}
	return []byte(b.String())
}

// TestLoadManyPhases: the phase order is not quadratic. With a list of
// every earlier phase kept per phase, 3,000 phases in a chain took 1.5 s
// and 540 MB of allocations here (9 s on a loaded machine); now 0.2 s and
// 145 MB, nearly all of it HCL's parser. The work is counted in bytes
// allocated (the test is not parallel, so that no other test's count in);
// the time bound is generous for a loaded machine and the race detector.
func TestLoadManyPhases(t *testing.T) {
	const n = 3000
	fsys := fstest.MapFS{"main.hcl": {Data: chain(n)}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	rb, diags := runbooks.NewLoader(fsys, runbooks.Options{Dir: "/x", Schemas: testSchemas()}).Load()
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	if diags.HasErrors() || len(rb.Phases) != n {
		t.Fatalf("%d phases: %s", len(rb.Phases), diags.Err())
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 100_000*n {
		t.Errorf("loading %d phases allocated %d MB, more than 100 kB a phase", n, got>>20)
	}
	if d > 8*time.Second {
		t.Errorf("loading %d phases took %s", n, d)
	}
}

// BenchmarkLoadChain3000 is TestLoadManyPhases as a benchmark.
func BenchmarkLoadChain3000(b *testing.B) {
	fsys := fstest.MapFS{"main.hcl": {Data: chain(3000)}}
	opts := runbooks.Options{Dir: "/x", Schemas: testSchemas()}
	for b.Loop() {
		if _, diags := runbooks.NewLoader(fsys, opts).Load(); diags.HasErrors() {
			b.Fatal(diags.Err())
		}
	}
}
