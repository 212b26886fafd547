package phases

import "github.com/zclconf/go-cty/cty"

// Schema is what a provider accepts: the attributes of its provider block and
// the step types it runs. runbooks checks every block against it at load
// time, so a typo is reported with its line before anything runs.
type Schema struct {
	Provider  Block
	StepTypes map[string]StepType
}

// StepType describes one step type, such as "exec".
type StepType struct {
	Description string
	Attributes  map[string]Attribute
	// Outputs lists the attributes that later steps may refer to as
	// TYPE.NAME.OUTPUT; nil means the step has no outputs.
	Outputs map[string]cty.Type
	// CanCheck says the type may also be used in a check block.
	CanCheck bool
	// CheckOnly says the type may only be used in a check block.
	CheckOnly bool
	// WaitsOnly says a step of this type has no effect of its own: it
	// waits, reads or asks (a pause, a readiness poll, an approval). A
	// gentle stop (the first Ctrl-C) ends it at once, recorded as not
	// done, and the next run does it again. A check block is such a step
	// whatever its type: every check only reads.
	WaitsOnly bool
	// Rollback says what rollback does to an applied step of this type,
	// for the reference (migrate docs). Prose only: left out of the
	// schema's encoding, so the plugin handshake's digest ignores it.
	Rollback string `json:"-"`
	// Rebase says that later steps of a runbook may change this type's
	// effect on purpose (a copy's destination that a restore unpacks):
	// after a step that depends on one of its steps runs, the engine
	// reads it again (ReadRequest.Rebase) and keeps what it finds as its
	// record, so that the next plan calls drift only a change from
	// outside the runbook.
	Rebase bool `json:",omitempty"`
}

// Block is a set of attributes.
type Block struct {
	Attributes map[string]Attribute
}

// Attribute is one setting of a step or provider.
type Attribute struct {
	Type        cty.Type
	Required    bool
	Description string
	// Sensitive values are redacted in plans, logs and state.
	Sensitive bool
}

// SensitiveMark is the cty mark carried by every sensitive value, whether it
// came from a variable marked sensitive, a sensitive attribute, or a
// provider's output. Renderers and the state replace marked values.
const SensitiveMark = "sensitive"

// Redacted is what stands in for a sensitive value wherever one would be shown.
const Redacted = "(sensitive value)"
