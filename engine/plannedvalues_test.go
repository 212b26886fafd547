package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// The canaries a saved plan's step is planned with and run with: none may
// appear in a plan file or a refusal.
const (
	plannedCanary = `pl4nned'P@ss"w0rd`
	appliedCanary = `4pplied'P@ss"w0rd`
)

var inputKey = []byte("0123456789abcdef0123456789abcdef")

// plannedValuesRunbook is node, other and config, run again at its turn:
// config's value waits for other (unknown at plan), while its command and
// password are what node's plan says node outputs (known at plan). node
// applies nodeValue as its output.
func plannedValuesRunbook(nodeValue string) *rb {
	b := newRB()
	p := b.phase("platform")
	p.Steps = append(p.Steps, mkStep(p, "node", value(nodeValue)), mkStep(p, "other", value("other")))
	p.Steps = append(p.Steps, mkStep(p, "config", phases.EvaluatorFunc(func(out map[phases.Address]cty.Value) (cty.Value, phases.Diagnostics) {
		nv := out[addr("node")].GetAttr("value")
		return cty.ObjectVal(map[string]cty.Value{
			"value":    out[addr("other")].GetAttr("value"),
			"command":  cty.TupleVal([]cty.Value{cty.StringVal("serve"), nv}),
			"password": nv.Mark(phases.SensitiveMark),
		}), nil
	}), "node", "other"))
	return b
}

// planning makes the fake's plan say node outputs nodePlanned, and config
// outputs configPlanned (unknown when "").
func planning(h *harness, nodePlanned, configPlanned string) {
	h.fake.PlanFn = func(_ context.Context, req providers.PlanRequest) providers.PlanResponse {
		resp := providers.PlanResponse{Diff: "value: (known after apply)"}
		switch req.Addr {
		case addr("node"):
			resp.Outputs = cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal(nodePlanned)})
		case addr("config"):
			v := cty.UnknownVal(cty.String)
			if configPlanned != "" {
				v = cty.StringVal(configPlanned)
			}
			resp.Outputs = cty.ObjectVal(map[string]cty.Value{"value": v})
		}
		return resp
	}
}

// savePlan plans with the input key and saves the plan; it returns the
// file's path.
func savePlan(t *testing.T, h *harness, r *phases.Runbook) string {
	t.Helper()
	e, st := h.openKeyed(r, inputKey)
	plan := mustPlan(t, e)
	st.Close()
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := engine.WritePlan(path, plan); err != nil {
		t.Fatal(err)
	}
	return path
}

// runSaved runs the plan saved at path, as run --plan does, and returns
// the error and config's last error.
func runSaved(t *testing.T, h *harness, r *phases.Runbook, path string) (error, string) {
	t.Helper()
	saved, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	e, st := h.openKeyed(r, inputKey)
	defer st.Close()
	err = e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true})
	rec, _ := st.Step(addr("config"))
	if rec == nil {
		return err, ""
	}
	return err, rec.LastError
}

// refusedConfig asserts that the run failed config alone, before applying
// it, naming each path of want and no value.
func refusedConfig(t *testing.T, h *harness, err error, lastError string, want ...string) {
	t.Helper()
	var pe *engine.PhaseError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0] != addr("config") {
		t.Fatalf("run: %v", err)
	}
	if n := h.fake.Applied("fake_step.config"); n != 0 {
		t.Errorf("config applied %d times from a stale plan", n)
	}
	for _, w := range append(want, "stale for fake_step.config", "make a new plan") {
		if !strings.Contains(lastError, w) {
			t.Errorf("the refusal does not say %q:\n%s", w, lastError)
		}
	}
	for _, v := range []string{plannedCanary, appliedCanary, "v1", "v2"} {
		if strings.Contains(lastError, v) {
			t.Errorf("the refusal shows the value %q:\n%s", v, lastError)
		}
	}
}

func TestSavedPlanWhoseInputsDifferIsRefusedNamingThePath(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "")
	// node's plan said it would output plannedCanary; it outputs
	// appliedCanary, and config's command and password are made of it.
	r := plannedValuesRunbook(appliedCanary).r
	path := savePlan(t, h, r)
	err, last := runSaved(t, h, r, path)
	refusedConfig(t, h, err, last, "inputs.command[1]", "inputs.password")
	if strings.Contains(last, "inputs.value") {
		t.Errorf("the refusal names a value that was not known at plan:\n%s", last)
	}
}

func TestSavedPlanWhosePlannedOutputsDifferIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "v1")
	r := plannedValuesRunbook(plannedCanary).r
	path := savePlan(t, h, r)
	planning(h, plannedCanary, "v2") // config's provider now plans another output
	err, last := runSaved(t, h, r, path)
	refusedConfig(t, h, err, last, "outputs.value")
	if strings.Contains(last, "inputs.") {
		t.Errorf("the refusal names inputs that did not change:\n%s", last)
	}
}

func TestSavedPlanWithTheSameValuesRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "v1")
	r := plannedValuesRunbook(plannedCanary).r
	path := savePlan(t, h, r)
	if err, last := runSaved(t, h, r, path); err != nil {
		t.Fatalf("run: %v (%s)", err, last)
	}
	if h.status("config") != "done" {
		t.Errorf("config is %s", h.status("config"))
	}
}

func TestSavedPlanUnknownValueMatchesAnything(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "") // config's output unknown at plan
	r := plannedValuesRunbook(plannedCanary).r
	path := savePlan(t, h, r)
	if sp := readStep(t, path, "config"); sp["planned_values"] == nil {
		t.Fatalf("the plan keeps no planned values for config: %v", sp)
	}
	planning(h, plannedCanary, "now known")
	// config's value was known after other (unknown at plan): whatever it
	// is now, and its output, now known, match.
	if err, last := runSaved(t, h, r, path); err != nil {
		t.Fatalf("run: %v (%s)", err, last)
	}
	if h.status("config") != "done" {
		t.Errorf("config is %s", h.status("config"))
	}
}

func TestOlderSavedPlanWithAStepToPlanAgainIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "")
	r := plannedValuesRunbook(plannedCanary).r
	path := savePlan(t, h, r)
	// A plan made before plans kept planned values.
	var plan map[string]any
	if err := json.Unmarshal([]byte(mustRead(t, path)), &plan); err != nil {
		t.Fatal(err)
	}
	for _, ph := range plan["phases"].([]any) {
		for _, s := range ph.(map[string]any)["steps"].([]any) {
			delete(s.(map[string]any), "planned_values")
		}
	}
	b, _ := json.Marshal(plan)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	saved, err := engine.ReadPlan(path)
	if err != nil {
		t.Fatal(err)
	}
	e, st := h.openKeyed(r, inputKey)
	err = e.CheckSavedPlan(context.Background(), saved)
	if err == nil {
		err = e.Run(context.Background(), context.Background(), saved, engine.RunOptions{SavedPlan: true})
	}
	st.Close()
	for _, w := range []string{"older migrate", "fake_step.config", "make a new plan"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("the older plan's refusal does not say %q: %v", w, err)
		}
	}
	if h.fake.ApplyCalled {
		t.Errorf("%s was applied from a plan that cannot be compared", h.fake.ApplyRequest.Addr)
	}
}

func TestPlannedValuesHoldNoValue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	planning(h, plannedCanary, "v1")
	r := plannedValuesRunbook(plannedCanary).r
	path := savePlan(t, h, r)
	text := mustRead(t, path)
	sum := sha256.Sum256([]byte(plannedCanary))
	for _, v := range []string{plannedCanary, strings.ReplaceAll(plannedCanary, `"`, `\"`), hex.EncodeToString(sum[:])} {
		if strings.Contains(text, v) {
			t.Errorf("the saved plan holds %q", v)
		}
	}
	pv, _ := readStep(t, path, "config")["planned_values"].(map[string]any)
	for _, p := range []string{"inputs.command[0]", "inputs.command[1]", "inputs.password", "outputs.value"} {
		if d, _ := pv[p].(string); len(d) != 64 {
			t.Errorf("planned_values[%q] = %q, want a digest", p, d)
		}
	}
	if pv["inputs.value"] != "unknown" {
		t.Errorf("planned_values[inputs.value] = %v, want unknown", pv["inputs.value"])
	}

	// Without an input key, a digest would be a plain SHA-256 anyone can
	// test guesses against: a secret is kept as "sensitive".
	h2 := newHarness(t)
	planning(h2, plannedCanary, "v1")
	e, st := h2.open(r)
	plan := mustPlan(t, e)
	st.Close()
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), hex.EncodeToString(sum[:])) || strings.Contains(string(b), "pl4nned") {
		t.Errorf("the unkeyed plan holds the secret or its plain digest")
	}
	if !strings.Contains(string(b), `"inputs.password":"sensitive"`) {
		t.Errorf("the unkeyed plan does not keep the secret as sensitive: %s", b)
	}
}

// readStep is the saved plan's entry of the named step, as JSON.
func readStep(t *testing.T, path, name string) map[string]any {
	t.Helper()
	var plan struct {
		Phases []struct {
			Steps []map[string]any `json:"steps"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, path)), &plan); err != nil {
		t.Fatal(err)
	}
	for _, ph := range plan.Phases {
		for _, s := range ph.Steps {
			if s["address"] == addr(name).String() {
				return s
			}
		}
	}
	t.Fatalf("no %s in the plan", name)
	return nil
}
