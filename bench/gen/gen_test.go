package gen

import (
	"os"
	"slices"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/runbooks"
)

// The two runbooks of the for_each comparison load to the same number of
// steps, one per group and key, with the addresses each way of writing
// them gives.
func TestExecFlatAndForEachPlanTheSameSteps(t *testing.T) {
	const groups, per = 4, 5
	flat, each := t.TempDir(), t.TempDir()
	if err := ExecFlat(flat, groups, per); err != nil {
		t.Fatal(err)
	}
	if err := ExecForEach(each, groups, per); err != nil {
		t.Fatal(err)
	}
	load := func(dir string) []string {
		t.Helper()
		ld := runbooks.NewLoader(os.DirFS(dir), runbooks.Options{Dir: dir, Schemas: map[string]phases.Schema{"local": local.New().Schema()}})
		rb, diags := ld.Load()
		if diags.HasErrors() {
			t.Fatalf("%s does not load: %v", dir, diags.Err())
		}
		var addrs []string
		for _, s := range rb.AllSteps() {
			addrs = append(addrs, s.Addr.String())
		}
		return addrs
	}
	fa, ea := load(flat), load(each)
	if len(fa) != groups*per || len(ea) != groups*per {
		t.Fatalf("written out: %d steps, with for_each: %d; want %d each", len(fa), len(ea), groups*per)
	}
	for _, want := range []string{`exec.g003_k004`} {
		if !slices.Contains(fa, want) {
			t.Errorf("written out lacks %s: %v", want, fa)
		}
	}
	for _, want := range []string{`exec.g000["k000"]`, `exec.g003["k004"]`} {
		if !slices.Contains(ea, want) {
			t.Errorf("with for_each lacks %s: %v", want, ea)
		}
	}
}
