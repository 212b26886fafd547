// Package sdk is the skeleton every provider shares, between
// providers.Interface and a provider's own code. A provider declares each
// step type as a typed handler; the SDK does, once for all providers:
// gating (unsupported type, not configured, invalid configuration),
// dispatch, the check for unknown values, decoding, interruption, default
// outputs, the scrubbed log writer, and the scrubbing of every field that
// leaves a provider.
//
// The attributes struct of a step type is its schema (see Attributes for
// the tags and field types) and its decoded inputs:
//
//	type waitAttrs struct {
//		Duration string `cty:"duration" required:"true" doc:"How long to wait."`
//	}
//
//	var waitStep = &sdk.StepType[*Provider, waitAttrs, struct{}, struct{}]{
//		Name: "wait", Description: "A pause of a given duration.",
//		Apply: func(ctx context.Context, c *sdk.Call[*Provider], a waitAttrs, _ struct{}, _ *sdk.Prior[struct{}, struct{}]) sdk.Apply[struct{}, struct{}] {
//			d, _ := time.ParseDuration(a.Duration)
//			time.Sleep(d) // (select on ctx.Done() in real code)
//			return sdk.Apply[struct{}, struct{}]{}
//		},
//	}
//
//	p := &sdk.Provider[*Provider]{Name: "local", Steps: []sdk.Step[*Provider]{waitStep}}
//
// Example (example_test.go) is a whole provider: block, settings, typed
// private and revert data, a sensitive attribute and output. providers/local
// is the reference for real handlers.
//
// A step type is one declaration: its StepType value holds the name, the
// description, the attributes (its A struct) and outputs, the rollback
// sentence, whether it can be a check (CanCheck, CheckOnly) or only waits
// (WaitsOnly), and its handlers. The provider's schema, and from it the
// reference (migrate docs), is derived from its list of declarations
// (Provider.Steps); nothing else restates them.
//
// Adding a step type:
//
//  1. Write one file beside the provider's others, named for the step
//     type: the name constant, the attributes and outputs structs, the
//     private and revert data, and the sdk.StepType with its handlers
//     (Rollback says in a sentence what rollback does).
//  2. Add its variable to the provider's Steps list (one line in New).
//  3. For a plugin provider (helm, talos), run go generate on it (make
//     generate): migrate compiles the schema in as data generated from
//     the declarations (EncodeSchema, DecodeSchema), so that it does not
//     link the provider's libraries; a test of the provider fails while
//     that data is out of date.
//  4. Regenerate the reference (go run ./cmd/migrate docs), whose check
//     pins every description, and add the step type's cases to the
//     provider's conformance tests.
//
// The SDK itself imports only phases, providers, secret and go-cty, so
// that the light schema packages (helmschema, talosschema) that decode a
// generated schema for migrate stay light.
//
// Per call: the configuration is checked against the schema's types, its
// secrets (marked values, attributes tagged sensitive) are learned into
// the call's Scrubber, and it is decoded with null as the zero value
// (pointer fields say whether a value was set, or use Call.Null). With
// values not known yet, Read says Unknown and Plan defers ("(known after
// apply)") without calling the handler, unless the step type sets
// Unknowns; Apply refuses them. Revert decodes leniently: no required
// check, unknowns as with Unknowns, since rollback may lack them.
//
// What leaves the provider is scrubbed: text fields (Read.Detail,
// Plan.Diff, Plan.Irreversible, revert data descriptions, records, every
// diagnostic) have each secret replaced by phases.Redacted; private and
// revert data are typed (P, I), JSON-encoded, then scrubbed the same way
// (a handler keeps a secret's place, not the secret, and takes it from
// the configuration again); output strings that contain a secret are
// marked sensitive, so later steps still get the value while state and
// terminal redact it; the log writer scrubs line by line and is flushed
// when Apply and Revert return. A string the runbook itself wrote in
// clear is left whole even when a secret occurs in it: it is no secret,
// and data carrying it (a revert command) must keep working.
//
// providertest.Canary runs a provider with secrets planted in its inputs and
// checks they leave by no field.
package sdk
