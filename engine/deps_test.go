package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencyDirection keeps the engine ignorant of concrete providers,
// HCL loading and the CLI: it may know providers only by their interface.
func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	const mod = "github.com/homelab-migrate/migrate/"
	out, err := exec.Command("go", "list", "-deps", "./").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(dep, mod)
		if !ok {
			if dep == "github.com/hashicorp/hcl/v2" || strings.HasPrefix(dep, "github.com/hashicorp/hcl/v2/") {
				t.Errorf("engine depends on %s: HCL belongs to package runbooks", dep)
			}
			continue
		}
		switch {
		case strings.HasPrefix(rest, "providers/"):
			t.Errorf("engine depends on the concrete provider %s", dep)
		case rest == "runbooks" || strings.HasPrefix(rest, "runbooks/"):
			t.Errorf("engine depends on %s: it must see runbooks only as phases values", dep)
		case strings.HasPrefix(rest, "cmd/") || rest == "views" || strings.HasPrefix(rest, "views/"):
			t.Errorf("engine depends on the CLI or a view: %s", dep)
		}
	}
}
