package buildmigrate_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/tests/buildmigrate"
)

// TestMakefileRecordsTheSameSums: make build sets the variables this
// package sets, each from the sum of its own program, after building it:
// the tests build migrate as users get it.
func TestMakefileRecordsTheSameSums(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?ms)^build:\n((?:\t.*\n)+)`).FindStringSubmatch(string(b))
	if recipe == nil {
		t.Fatal("the Makefile has no build target")
	}
	migrate := strings.Index(recipe[1], "./cmd/migrate\n")
	if migrate < 0 {
		t.Fatalf("make build does not build ./cmd/migrate last, after its programs:\n%s", recipe[1])
	}
	for name, v := range buildmigrate.SumVars {
		built := strings.Index(recipe[1], "./cmd/"+name+" ")
		summed := regexp.MustCompile(`(\w+)=\$\$\(sha256sum bin/` + name + ` `).FindStringSubmatch(recipe[1])
		if built < 0 || built > migrate || summed == nil || !strings.Contains(recipe[1], "-X "+v+"=$$"+summed[1]) {
			t.Errorf("make build does not build %s, then migrate with -X %s=its sha256:\n%s", name, v, recipe[1])
		}
	}
}
