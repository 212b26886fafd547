package local_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/local"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// TestSchemaUnchanged: the schema derived from the attribute structs is
// the one written by hand before the SDK, word for word.
func TestSchemaUnchanged(t *testing.T) {
	got := local.New().Schema()
	providertest.SameAttributes(t, "provider block", got.Provider.Attributes, schema.Provider.Attributes)
	if len(got.StepTypes) != len(schema.StepTypes) {
		t.Fatalf("%d step types, want %d", len(got.StepTypes), len(schema.StepTypes))
	}
	for name, want := range schema.StepTypes {
		providertest.SameStepType(t, name, got.StepTypes[name], want)
	}
}

// schema is the local provider's schema as written by hand before the SDK.
var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{}},
	StepTypes: map[string]phases.StepType{
		local.Exec: {
			Description: "Runs a command given as an argv list; no shell unless the argv asks for one (\"sh\", \"-c\", ...).",
			Attributes: map[string]phases.Attribute{
				"command":        {Type: cty.List(cty.String), Required: true, Description: "The argv to run; the first element is looked up in PATH."},
				"env":            {Type: cty.Map(cty.String), Description: "Environment variables added to migrate's own (which lacks MIGRATE_VAR_* and MIGRATE_AGE_IDENTITY: pass what a command needs here)."},
				"dir":            {Type: cty.String, Description: "Working directory, relative to the runbook directory."},
				"revert":         {Type: cty.List(cty.String), Description: "The argv rollback runs to undo the command, with the same env and dir."},
				"creates":        {Type: cty.String, Description: "A path, relative to dir; the command is skipped when it exists."},
				"revert_creates": {Type: cty.String, Description: "A path, relative to dir, that the revert makes last: a revert resumed after an interruption is skipped when it exists."},
			},
			Outputs:  map[string]cty.Type{"exit_code": cty.Number},
			CanCheck: true,
		},
		local.HTTPCheck: {
			Description: "Waits until a URL answers an expected HTTP status. Redirects are not followed.",
			Attributes: map[string]phases.Attribute{
				"url":      {Type: cty.String, Required: true, Description: "The http:// or https:// URL to GET."},
				"status":   {Type: cty.Number, Description: "The status expected, 200 by default."},
				"timeout":  {Type: cty.String, Description: "How long to keep trying, \"60s\" by default."},
				"interval": {Type: cty.String, Description: "The pause between tries, \"1s\" by default."},
				"insecure": {Type: cty.Bool, Description: "Skip TLS certificate verification."},
			},
			Outputs:  map[string]cty.Type{"status": cty.Number},
			CanCheck: true,
		},
		local.Approval: {
			Description: "A human gate: asks at the terminal, or needs --approve ADDRESS; records who approved and when.",
			Attributes: map[string]phases.Attribute{
				"message":        {Type: cty.String, Required: true, Description: "What the person must have done or agree to."},
				"revert_message": {Type: cty.String, Description: "What a person must do by hand when this step is rolled back (switch the DNS back): the rollback plan lists it before anything is undone, and the rollback prints it when it reaches this step."},
			},
			Outputs: map[string]cty.Type{"approved_by": cty.String},
		},
		local.Wait: {
			Description: "A pause of a given duration.",
			Attributes: map[string]phases.Attribute{
				"duration": {Type: cty.String, Required: true, Description: "How long to wait, such as \"30s\"; \"0s\" is allowed."},
			},
		},
	},
}
