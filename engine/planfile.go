package engine

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/homelab-migrate/migrate/state"
)

// WritePlan saves a plan (plan --out) readable only by its owner. The file
// is replaced atomically: a crash or a full disk leaves the previous plan
// or the new one, never a truncated plan that run --plan would refuse.
func WritePlan(path string, p *Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	if err := state.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	return nil
}

// ReadPlan loads a plan saved by WritePlan, refusing another format
// version.
func ReadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("reading the plan %s: %w", path, err)
	}
	if p.FormatVersion != PlanFormatVersion {
		return nil, fmt.Errorf("the plan %s is in format version %d; this migrate reads version %d: make a new plan", path, p.FormatVersion, PlanFormatVersion)
	}
	return &p, nil
}
