package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONSaysWhyAsAReasonCode: plan --json gives each step's reason as a
// code a consumer can switch on (never_ran before a run; inputs_changed
// once the runbook changed a done step), and the words stay in the view.
func TestJSONSaysWhyAsAReasonCode(t *testing.T) {
	t.Parallel()
	hcl := func(word string) map[string]string {
		return map[string]string{"main.hcl": `
phase "A" {
  step "exec" "say" { command = ["echo", "` + word + `"] }
}
`}
	}
	dir := runbook(t, hcl("one"))
	codes := func() map[string]string {
		r := run(t, dir, 0, "plan", "--json")
		var doc struct {
			Phases []struct {
				Steps []struct {
					Address    string `json:"address"`
					ReasonCode string `json:"reason_code"`
				} `json:"steps"`
			} `json:"phases"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		out := map[string]string{}
		for _, s := range doc.Phases[0].Steps {
			out[s.Address] = s.ReasonCode
		}
		return out
	}
	if got := codes()["exec.say"]; got != "never_ran" {
		t.Errorf("before any run, plan --json says reason_code %q, want never_ran", got)
	}
	run(t, dir, 0, "run", "--all", "--auto-approve", "--no-color")
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(hcl("two")["main.hcl"]), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := codes()["exec.say"]; got != "inputs_changed" {
		t.Errorf("after the inputs changed, plan --json says reason_code %q, want inputs_changed", got)
	}
	if r := run(t, dir, 0, "plan", "--no-color"); !strings.Contains(r.stdout, "~ exec.say will run again: its inputs changed since it ran") {
		t.Errorf("the plan's words changed:\n%s", r)
	}
}
