// Package phases is the model of a migration: a Runbook of Phases, each a
// small graph of Steps and Checks, addressed as TYPE.NAME. It is pure data:
// no I/O, no HCL parsing (package runbooks builds these values from files),
// no execution (package engine walks them).
//
// The one piece of behaviour a Step carries is its Evaluator, which turns the
// step's attributes into a cty value once the outputs of the steps it depends
// on are known. runbooks implements it over HCL expressions, tests implement
// it with plain values, and the engine calls it without knowing which.
package phases
