package runbooks_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
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
	// Binary input: one "File Is Not Text" error, not one per byte.
	f.Add(bytes.Repeat([]byte{0}, 4096))
	f.Add([]byte("phase \"a\" {\n  description = \"\xff\xfe\"\n}\n\x00"))
	f.Add([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	// Look-alike names: decomposed accents and Cyrillic letters.
	f.Add([]byte("variable \"cafe\u0301\" {}\nphase \"\u0441afe\" {\n  step \"exec\" \"caf\u00e9\" { command = [var.caf\u00e9] }\n}\n"))
	// A step and a check that name no provider among two blocks of their
	// type (an Ambiguous Provider each); two blocks, one named default,
	// which the step takes.
	f.Add([]byte("provider \"talos\" \"a\" { version = \"v1\" }\nprovider \"talos\" \"b\" { version = \"v1\" }\nphase \"p\" {\n  step \"talos_kubeconfig\" \"k\" {}\n  check \"talos_read\" \"c\" { path = \"/x\" }\n}\n"))
	f.Add([]byte("provider \"talos\" \"a\" { version = \"v1\" }\nprovider \"talos\" \"default\" { version = \"v1\" }\nphase \"p\" {\n  step \"talos_kubeconfig\" \"k\" {}\n}\n"))
	// moved blocks: a chain, a key, a cycle.
	// Service blocks: lists, checks, groups, durations, the wrong kinds.
	f.Add([]byte("phase \"a\" {\n  step \"exec\" \"s\" { command = [\"true\"] }\n  check \"http_check\" \"c\" { url = \"http://x\" }\n}\nservice \"x\" {\n  stop = [exec.s, exec.s, http_check.c, group.g.exec.s, \"exec.s\"]\n  serving = exec.s\n  max_downtime = \"-1m\"\n}\nservice \"x\" {\n  stop = exec.s\n  serving = http_check.c\n  max_downtime = null\n}\n"))
	f.Add([]byte("phase \"a\" {\n  step \"exec\" \"c\" { command = [\"true\"] }\n}\nmoved {\n  from = exec.a\n  to   = exec.b\n}\nmoved {\n  from = exec.b\n  to   = exec.c\n}\nmoved {\n  from = exec.k[\"x\"]\n  to = exec.c\n}\nmoved {\n  from = exec.c\n  to = exec.a\n}\n"))
	// removed blocks: a step, a call, a key, bad values, a clash.
	f.Add([]byte("phase \"a\" {\n  step \"exec\" \"c\" { command = [\"true\"] }\n}\nremoved {\n  from   = exec.a\n  revert = false\n}\nremoved {\n  from   = group.g[\"k\"]\n  revert = true\n}\nremoved {\n  from   = group.\n  revert = 1\n}\nremoved {\n  from   = exec.c\n  revert = null\n}\nmoved {\n  from = exec.a\n  to   = exec.c\n}\n"))
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
		inFile := 0
		for _, d := range diags {
			if d.Summary == "" {
				t.Errorf("diagnostic without a summary: %#v", d)
			}
			if d.Subject != nil && d.Subject.Filename == "main.hcl" {
				inFile++
			}
		}
		if inFile > 20 {
			t.Errorf("%d diagnostics for main.hcl, want at most 20 and a count", inFile)
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

// FuzzGroups feeds arbitrary bytes as a runbook that calls a group and as
// the group's file: no panic, every diagnostic has a summary and names a
// file it can quote, and what loads evaluates, before and after steps ran.
func FuzzGroups(f *testing.F) {
	f.Add([]byte(groupFiles["main.hcl"]), []byte(groupFiles["groups/app/main.hcl"]))
	f.Add([]byte("phase \"p\" {\n  group \"g\" {\n    source = \"./groups/app\"\n    for_each = toset([\"a\"])\n    x = each.key\n  }\n  step \"exec\" \"s\" { command = [group.g[\"a\"].o] }\n}\n"),
		[]byte("variable \"x\" {}\noutput \"o\" { value = var.x }\nstep \"exec\" \"e\" {\n  for_each = toset([var.x])\n  command = [each.key]\n}\ngroup \"n\" { source = \"./groups/app\" }\n"))
	f.Add([]byte("phase \"p\" {\n  group \"g\" { source = \"./groups/app\" }\n  group \"g\" { source = \"./x\" }\n  step \"exec\" \"s\" { depends_on = [group.g, group.h[\"k\"], group.g.exec.x] }\n}\nmoved {\n  from = exec.s\n  to = group.g.exec.x\n}\n"),
		[]byte("step \"exec\" \"x\" { command = [var.nope, group.g.o] }\noutput \"o\" { value = exec.x.stdout }\n"))
	schemas := testSchemas()
	f.Fuzz(func(t *testing.T, main, group []byte) {
		watchdog := time.AfterFunc(20*time.Second, func() { panic(fmt.Sprintf("Load hangs on %q / %q", main, group)) })
		defer watchdog.Stop()
		fsys := fstest.MapFS{
			"main.hcl":            {Data: main},
			"groups/app/main.hcl": {Data: group},
		}
		l := runbooks.NewLoader(fsys, runbooks.Options{Dir: "/nonexistent", Schemas: schemas})
		rb, diags := l.Load()
		if rb == nil {
			t.Fatal("Load returned a nil runbook")
		}
		for _, d := range diags {
			if d.Summary == "" {
				t.Errorf("diagnostic without a summary: %#v", d)
			}
			if d.Subject != nil && l.Files()[d.Subject.Filename] == nil && !strings.HasPrefix(d.Subject.Filename, "<") {
				t.Errorf("diagnostic in %q, a file the loader cannot quote: %v", d.Subject.Filename, d)
			}
		}
		if diags.HasErrors() {
			return
		}
		for _, s := range rb.AllSteps() {
			s.Config.Evaluate(nil)
			s.Config.Evaluate(map[phases.Address]cty.Value{})
		}
	})
}
