// Package attrs reads the evaluated attributes of a step or provider block
// (a cty object, unmarked) into Go values for the providers, the way every
// provider needs it: a missing attribute is null, an unknown one (a value
// that depends on a step that has not run) is reported as not known rather
// than as an error, and a wrong type is a diagnostic naming the attribute
// and the block — never a panic.
//
// Each function appends its problems to the diagnostics it is given, so a
// provider collects every mistake of a block in one pass.
package attrs
