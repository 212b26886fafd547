package runbooks_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

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
			b.Fatal(diags.Error())
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
			b.Fatal(diags.Error())
		}
	}
}
