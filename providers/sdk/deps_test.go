package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLightDependencies: schemas derived by the SDK are compiled into
// migrate, so the SDK may depend on nothing heavy: of this module only
// phases (and graph, which phases orders phases with and which imports
// only the standard library), providers and secret; outside it only
// go-cty and what go-cty itself needs.
func TestLightDependencies(t *testing.T) {
	t.Parallel()
	const mod = "github.com/homelab-migrate/migrate/"
	out, err := exec.Command("go", "list", "-deps", "./").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"phases": true, "graph": true, "providers": true, "secret": true, "providers/sdk": true}
	for _, dep := range strings.Fields(string(out)) {
		if rest, ok := strings.CutPrefix(dep, mod); ok {
			if !allowed[rest] {
				t.Errorf("the sdk depends on %s", dep)
			}
			continue
		}
		first, _, _ := strings.Cut(dep, "/")
		if !strings.Contains(first, ".") {
			continue // the standard library
		}
		switch {
		case strings.HasPrefix(dep, "github.com/zclconf/go-cty/"),
			strings.HasPrefix(dep, "github.com/apparentlymart/go-textseg/"),
			strings.HasPrefix(dep, "golang.org/x/text/"):
		default:
			t.Errorf("the sdk depends on %s", dep)
		}
	}
}
