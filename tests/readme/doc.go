// Package readme runs the commands of the project's README.md, in order,
// in a fresh copy of the repository (what git tracks), so that a README
// that no longer works fails CI. It also checks that every relative link
// of README.md and docs/*.md leads to a file of the repository.
//
// A ```sh block that cannot run in a test (make test itself, benchmarks)
// is preceded in README.md by <!-- not run by tests: REASON -->; every
// other ```sh block is run.
package readme
