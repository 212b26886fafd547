package phases

// Role is a role block: role "NAME" { PART = REF | [REF, ...] }. It names
// the parts of a runbook that a program reading the runbook (migrate
// init, reading examples/homelab as its template) needs to find by
// meaning rather than by name: the steps, variables and phases a role
// stands for. The loader checks that every reference is declared.
type Role struct {
	Name  string
	Parts map[string]*RolePart
	Range Range
}

// RolePart is one attribute of a role: its references, in the order
// written (one for PART = REF).
type RolePart struct {
	Name  string
	Refs  []RoleRef
	Range Range // the attribute, PART = ...
}

// RoleRef is one reference of a role part: a step or check (TYPE.NAME), a
// variable (var.NAME) or a phase (phase.NAME).
type RoleRef struct {
	Kind  string // RefStep, RefVar or RefPhase
	Step  Address
	Name  string // the variable's or the phase's name; the step's address
	Range Range
}

// The kinds of a RoleRef.
const (
	RefStep  = "step"
	RefVar   = "var"
	RefPhase = "phase"
)

// String is the reference as written: TYPE.NAME, var.NAME, phase.NAME.
func (r RoleRef) String() string {
	if r.Kind == RefStep {
		return r.Step.String()
	}
	return r.Kind + "." + r.Name
}
