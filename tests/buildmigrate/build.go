package buildmigrate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

const module = "github.com/homelab-migrate/migrate/"

// SumVars maps each provider program to the variable of migrate that
// records its sha256, as the Makefile's build sets it.
var SumVars = map[string]string{
	"migrate-provider-talos": "main.talosProgramSum",
	"migrate-provider-helm":  "main.helmProgramSum",
}

// Build builds the provider programs into dir, then migrate beside them
// carrying their sums, and the extra commands ("cmd/migrate-lab", paths
// inside the module) as they are.
func Build(dir string, extra ...string) error {
	sums, err := programs(dir, slices.Sorted(maps.Keys(SumVars)), extra)
	if err != nil {
		return err
	}
	return Migrate(dir, sums)
}

// Programs builds the named provider programs into dir and returns their
// sums, by name.
func Programs(dir string, names ...string) (map[string]string, error) {
	return programs(dir, names, nil)
}

// programs builds the named provider programs and the extra commands in
// one go build (which links them in parallel), and returns the programs'
// sums.
func programs(dir string, names, extra []string) (map[string]string, error) {
	pkgs := slices.Clone(extra)
	for _, name := range names {
		pkgs = append(pkgs, "cmd/"+name)
	}
	if err := goBuild(dir, "", pkgs...); err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for _, name := range names {
		s, err := Sum(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		sums[name] = s
	}
	return sums, nil
}

// Migrate builds migrate into dir carrying sums (a program's file name ->
// its sha256, hex): a test's own programs, or none.
func Migrate(dir string, sums map[string]string) error {
	var flags []string
	for name, s := range sums {
		v, ok := SumVars[name]
		if !ok {
			return fmt.Errorf("buildmigrate: no provider program is called %s", name)
		}
		flags = append(flags, "-X", v+"="+s)
	}
	return goBuild(dir, strings.Join(flags, " "), "cmd/migrate")
}

// Sum is the sha256 of a file, hex.
func Sum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// goBuild builds packages of the module into dir.
func goBuild(dir, ldflags string, pkgs ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	for _, p := range pkgs {
		args = append(args, module+p)
	}
	cmd := exec.Command(goCommand(), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// goCommand is the go of the toolchain running the tests, else the one
// in PATH.
func goCommand() string {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err == nil {
		return gobin
	}
	return "go"
}
