// Package reference writes the reference of the runbook language and of
// every provider's step types as Markdown (docs/reference.md, made by
// migrate docs). The language's blocks are described here, as data; the
// providers' blocks and step types come from their compiled-in schemas
// (phases.Schema: the same data the loader checks runbooks against), so
// the reference cannot drift from what validate accepts. The output is
// sorted and has no timestamps: the same schemas give the same bytes, and
// a test compares it with the checked-in file.
package reference
