package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// groupRunbook calls a group once per key; the group's steps log what
// they do and undo, in the runbook's directory.
func groupRunbook(keys string) map[string]string {
	return map[string]string{
		"main.hcl": `
variable "apps" {
  default = [` + keys + `]
}
phase "A" {
  group "app" {
    source   = "./groups/app"
    for_each = toset(var.apps)
    app      = each.key
  }
  step "exec" "after" {
    command = ["sh", "-c", "echo after ${group.app["a"].done} >> log"]
    depends_on = [group.app]
  }
}
`,
		"groups/app/main.hcl": `
variable "app" {}
step "exec" "make" {
  command = ["sh", "-c", "echo made ${var.app} >> log"]
  revert  = ["sh", "-c", "echo undo ${var.app} >> log"]
}
output "done" {
  value = "${var.app}:${exec.make.exit_code}"
}
`,
	}
}

// TestGroupsPlanRunAndRevertRemovedInstances: a group called for three
// keys plans three grouped steps (plan --json, graph); the runbook reads
// an instance's output; a key removed from the call's map plans the
// revert of its steps, and run undoes them.
func TestGroupsPlanRunAndRevertRemovedInstances(t *testing.T) {
	t.Parallel()
	dir := runbook(t, groupRunbook(`"a", "b", "c"`))
	plan := func() map[string]string {
		r := run(t, dir, 0, "plan", "--json")
		var doc struct {
			Phases []struct {
				Steps []struct {
					Address    string `json:"address"`
					Group      string `json:"group"`
					Action     string `json:"action"`
					ReasonCode string `json:"reason_code"`
				} `json:"steps"`
			} `json:"phases"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		out := map[string]string{}
		for _, s := range doc.Phases[0].Steps {
			out[s.Address] = strings.TrimSpace(s.Group + " " + s.Action + " " + s.ReasonCode)
		}
		return out
	}
	got := plan()
	for _, k := range []string{"a", "b", "c"} {
		a := `group.app["` + k + `"].exec.make`
		if want := `group.app["` + k + `"] create never_ran`; got[a] != want {
			t.Errorf("plan --json: %s is %q, want %q (plan: %v)", a, got[a], want, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("plan --json has %d steps, want 4: %v", len(got), got)
	}
	if r := run(t, dir, 0, "graph"); !strings.Contains(r.stdout, `label = "group.app[\"b\"]"`) {
		t.Errorf("the graph does not frame the call instances:\n%s", r)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	log := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if l := log(); strings.Count(l, "made ") != 3 || !strings.HasSuffix(l, "after a:0\n") {
		t.Fatalf("three instances, then the step reading group.app[\"a\"].done: log = %q", l)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(groupRunbook(`"a", "c"`)["main.hcl"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := plan(); got[`group.app["b"].exec.make`] != `group.app["b"] revert group_removed` {
		t.Errorf(`with "b" removed, plan --json says %q for its step, want revert group_removed (plan: %v)`, got[`group.app["b"].exec.make`], got)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if l := log(); !strings.HasSuffix(l, "undo b\n") || strings.Count(l, "made ") != 3 {
		t.Errorf("run did not revert group.app[\"b\"] alone: log = %q", l)
	}
}

// TestMovedIntoAGroup: steps written out, run, then rewritten as a group
// called per key with moved blocks: nothing runs again.
func TestMovedIntoAGroup(t *testing.T) {
	t.Parallel()
	dir := runbook(t, map[string]string{"main.hcl": `
phase "A" {
  step "exec" "make_a" {
    command = ["sh", "-c", "echo made a >> log"]
    revert  = ["sh", "-c", "echo undo a >> log"]
  }
  step "exec" "make_b" {
    command = ["sh", "-c", "echo made b >> log"]
    revert  = ["sh", "-c", "echo undo b >> log"]
  }
}
`})
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	files := groupRunbook(`"a", "b"`)
	files["main.hcl"] = strings.Replace(files["main.hcl"], `  step "exec" "after" {
    command = ["sh", "-c", "echo after ${group.app["a"].done} >> log"]
    depends_on = [group.app]
  }
`, "", 1) + `
moved {
  from = exec.make_a
  to   = group.app["a"].exec.make
}
moved {
  from = exec.make_b
  to   = group.app["b"].exec.make
}
`
	for name, src := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, dir, 0, "plan", "--no-color")
	if !strings.Contains(r.stdout, `# exec.make_a moved to group.app["a"].exec.make`) || !strings.Contains(r.stdout, "0 to create") {
		t.Fatalf("the plan does not carry the records into the group:\n%s", r)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	run(t, dir, 0, "rollback", "--auto-approve", "--no-color")
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if l := string(b); strings.Count(l, "made ") != 2 || !strings.Contains(l, "undo a\n") || !strings.Contains(l, "undo b\n") {
		t.Errorf("moved records: nothing run again, and rollback undoes them under the new addresses: log = %q", l)
	}
}

// TestGroupCallEmptiedRevertsEveryInstance: a call whose map becomes
// empty still has its instances' steps reverted.
func TestGroupCallEmptiedRevertsEveryInstance(t *testing.T) {
	t.Parallel()
	without := func(keys string) map[string]string {
		files := groupRunbook(keys)
		i := strings.Index(files["main.hcl"], `  step "exec" "after"`)
		files["main.hcl"] = files["main.hcl"][:i] + "}\n"
		return files
	}
	dir := runbook(t, without(`"a", "b"`))
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(without("")["main.hcl"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, dir, 0, "plan", "--no-color"); !strings.Contains(r.stdout, "2 to revert") {
		t.Fatalf("with the call's map emptied, the plan does not revert both instances:\n%s", r)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if l := string(b); !strings.Contains(l, "undo a\n") || !strings.Contains(l, "undo b\n") {
		t.Errorf("run did not undo both instances: log = %q", l)
	}
}
