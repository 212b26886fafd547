package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func forEachRunbook(keys string) map[string]string {
	return map[string]string{"main.hcl": `
variable "apps" {
  default = [` + keys + `]
}
phase "A" {
  step "exec" "app" {
    for_each = toset(var.apps)
    command  = ["sh", "-c", "echo made ${each.key} >> log"]
    revert   = ["sh", "-c", "echo undo ${each.value} >> log"]
  }
  step "exec" "after" {
    command    = ["sh", "-c", "echo after >> log"]
    depends_on = [exec.app]
  }
}
`}
}

// TestForEachPlansRunsAndRevertsRemovedKeys: for_each over three keys
// plans three steps addressed by key (plan, --json, graph, status); a key
// removed from the set is planned for revert, says why, and run reverts
// it with its revert data.
func TestForEachPlansRunsAndRevertsRemovedKeys(t *testing.T) {
	t.Parallel()
	dir := runbook(t, forEachRunbook(`"a", "b", "c"`))
	type planDoc struct {
		Phases []struct {
			Steps []struct {
				Address    string `json:"address"`
				Action     string `json:"action"`
				ReasonCode string `json:"reason_code"`
			} `json:"steps"`
		} `json:"phases"`
	}
	plan := func() map[string]string {
		r := run(t, dir, 0, "plan", "--json")
		var doc planDoc
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		out := map[string]string{}
		for _, s := range doc.Phases[0].Steps {
			out[s.Address] = s.Action + " " + s.ReasonCode
		}
		return out
	}
	got := plan()
	for _, a := range []string{`exec.app["a"]`, `exec.app["b"]`, `exec.app["c"]`, `exec.after`} {
		if got[a] != "create never_ran" {
			t.Errorf("plan --json: %s is %q, want create never_ran (plan: %v)", a, got[a], got)
		}
	}
	if len(got) != 4 {
		t.Errorf("plan --json has %d steps, want 4: %v", len(got), got)
	}
	if r := run(t, dir, 0, "plan", "--no-color"); !strings.Contains(r.stdout, `+ exec.app["b"] will run`) || !strings.Contains(r.stdout, "4 to create") {
		t.Errorf("the plan does not show the instances:\n%s", r)
	}
	if r := run(t, dir, 0, "graph"); !strings.Contains(r.stdout, `exec.app[\"b\"]`) {
		t.Errorf("the graph does not show the instances:\n%s", r)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	log := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if l := log(); l != "made a\nmade b\nmade c\nafter\n" && !(strings.Count(l, "made ") == 3 && strings.HasSuffix(l, "after\n")) {
		t.Fatalf("each.key substituted, after last: log = %q", l)
	}

	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(forEachRunbook(`"a", "c"`)["main.hcl"]), 0o644); err != nil {
		t.Fatal(err)
	}
	got = plan()
	if got[`exec.app["b"]`] != "revert key_removed" {
		t.Errorf(`with "b" removed, plan --json says %q for it, want revert key_removed (plan: %v)`, got[`exec.app["b"]`], got)
	}
	r := run(t, dir, 0, "plan", "--no-color", "--out", filepath.Join(dir, "plan.bin"))
	if !strings.Contains(r.stdout, `- exec.app["b"] will be reverted: its key is no longer in the for_each of exec.app`) || !strings.Contains(r.stdout, "1 to revert") {
		t.Errorf("the plan does not say the removed key is reverted:\n%s", r)
	}
	// The saved plan holds the revert: run --plan accepts it.
	run(t, dir, 0, "run", "--plan", filepath.Join(dir, "plan.bin"), "--auto-approve", "--no-color")
	if l := log(); !strings.HasSuffix(l, "undo b\n") || strings.Count(l, "made ") != 3 {
		t.Errorf("run did not revert exec.app[\"b\"] alone: log = %q", l)
	}
	if r := run(t, dir, 0, "plan", "--no-color"); strings.Contains(r.stdout, "revert") || !strings.Contains(r.stdout, "0 to create") {
		t.Errorf("once reverted, the plan still has work:\n%s", r)
	}
}

// TestRollbackRevertsARemovedKey: a rollback undoes an instance whose key
// left the map too, not only the instances the runbook still has.
func TestRollbackRevertsARemovedKey(t *testing.T) {
	t.Parallel()
	dir := runbook(t, forEachRunbook(`"a", "b"`))
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(forEachRunbook(`"a"`)["main.hcl"]), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, 0, "rollback", "--auto-approve", "--no-color")
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if l := string(b); !strings.Contains(l, "undo a\n") || !strings.Contains(l, "undo b\n") {
		t.Errorf("rollback did not undo both instances: log = %q\n%s", l, r)
	}
}
