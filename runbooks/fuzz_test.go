package runbooks_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/homelab-migrate/migrate/runbooks"
)

// FuzzLoad feeds arbitrary bytes to the loader as main.hcl: it must never
// panic, and whatever loads without errors must evaluate without panicking.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*", "*.hcl"))
	more, _ := filepath.Glob(filepath.Join("testdata", "*", "*", "*.hcl"))
	for _, p := range append(seeds, more...) {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	schemas := testSchemas()
	// No file system writes per input: the machine is shared, and disk
	// latency would look like hangs.
	dir := f.TempDir()
	varFile := filepath.Join(dir, "vars.hcl")
	if err := os.WriteFile(varFile, []byte("a = \"x\"\nn = [1]\nundeclared = 2\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		// A hang is a bug too: crash, so that the fuzzer keeps the input.
		watchdog := time.AfterFunc(20*time.Second, func() { panic(fmt.Sprintf("Load hangs on %q", src)) })
		defer watchdog.Stop()
		fsys := fstest.MapFS{
			"main.hcl":        {Data: src},
			"files/hello.txt": {Data: []byte("hello")},
			"files/t.tmpl":    {Data: []byte("${x}")},
		}
		l := runbooks.NewLoader(fsys, runbooks.Options{
			Dir:      dir,
			Schemas:  schemas,
			Vars:     []string{"a=b", "n=" + strings.ToValidUTF8(string(src[:min(len(src), 16)]), "")},
			VarFiles: []string{varFile},
			Environ:  []string{"MIGRATE_VAR_x=[1]", "HOME=/nonexistent"},
		})
		rb, diags := l.Load()
		if rb == nil {
			t.Fatal("Load returned a nil runbook")
		}
		for _, d := range diags {
			if d.Summary == "" {
				t.Errorf("diagnostic without a summary: %#v", d)
			}
		}
		if diags.HasErrors() {
			return
		}
		for _, p := range rb.Providers {
			p.Config.Evaluate(nil)
		}
		for _, s := range rb.AllSteps() {
			s.Config.Evaluate(nil)
		}
	})
}
