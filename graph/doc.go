// Package graph is the one directed graph of the project: cycle search,
// a stable topological order and which nodes must come before which, for
// the phase order and the steps of a phase, used by runbooks (to report
// mistakes) and by the engine (to plan, run and roll back).
//
// Nodes are the integers 0..n-1, in declaration order; callers keep their
// own table from index to phase or step. An edge from a to b says that a
// waits for b (b comes first). Where the edges leave a choice, results
// follow declaration order, so that plans and reports are the same on
// every run. It imports nothing of this module.
package graph
