package phases

import (
	"fmt"
	"strings"
)

// Range is a place in a source file, 1-based, end exclusive. It mirrors
// hcl.Range so that this package stays free of HCL.
type Range struct {
	Filename            string
	StartLine, StartCol int
	EndLine, EndCol     int
	StartByte, EndByte  int
}

func (r Range) String() string {
	if r.Filename == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d,%d", r.Filename, r.StartLine, r.StartCol)
}

// Severity of a diagnostic.
type Severity int

const (
	Error Severity = iota
	Warning
)

// Diagnostic is a problem found while loading a runbook, or evaluating or
// running a step, as a person should read it: a short summary, a detail in
// sentences, and where it applies when that is known. It is the one
// diagnostics type of migrate: package runbooks converts HCL's at its
// boundary, and the views print only these.
type Diagnostic struct {
	Severity Severity
	Summary  string
	Detail   string
	Subject  *Range
	// Context, when set, is the wider range (the whole expression) whose
	// lines a snippet of the source shows around Subject.
	Context *Range
	// Values says which values the expression in error had, as sorted
	// "NAME as VALUE" statements; sensitive values are never among them.
	Values []string
	// Definite marks an error that holds whatever the values not known
	// yet turn out to be (a PodSecurity violation of a chart rendered
	// before its cluster exists): the plan of a step whose inputs wait
	// for other steps keeps it, instead of deferring it with the diff.
	Definite bool
}

// Diagnostics is a list of problems; it is an error only when one of them
// is an Error.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (d Diagnostics) HasErrors() bool {
	for _, x := range d {
		if x.Severity == Error {
			return true
		}
	}
	return false
}

// Err returns the errors as one error, or nil.
func (d Diagnostics) Err() error {
	if !d.HasErrors() {
		return nil
	}
	return diagError(d)
}

// Errorf builds a single error diagnostic.
func Errorf(summary, detailFormat string, args ...any) Diagnostics {
	return Diagnostics{{Severity: Error, Summary: summary, Detail: fmt.Sprintf(detailFormat, args...)}}
}

// FromError wraps a plain error as a diagnostic with the given summary.
func FromError(summary string, err error) Diagnostics {
	if err == nil {
		return nil
	}
	return Diagnostics{{Severity: Error, Summary: summary, Detail: err.Error()}}
}

type diagError Diagnostics

func (d diagError) Error() string {
	var b strings.Builder
	for i, x := range d {
		if x.Severity != Error {
			continue
		}
		if i > 0 && b.Len() > 0 {
			b.WriteString("; ")
		}
		if x.Subject != nil && x.Subject.Filename != "" {
			b.WriteString(x.Subject.String())
			b.WriteString(": ")
		}
		b.WriteString(x.Summary)
		if x.Detail != "" {
			b.WriteString(": ")
			b.WriteString(x.Detail)
		}
	}
	return b.String()
}
