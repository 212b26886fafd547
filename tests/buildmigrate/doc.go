// Package buildmigrate builds migrate for the tests as make build does:
// the provider programs first, then migrate carrying their sha256 sums
// (-ldflags -X), so that the tests run the migrate users run, which
// refuses a provider program that differs from the one it was built with
// (providers/plugin, find.go). Every test that runs migrate with its
// provider programs builds them here; a test of a build without sums (go
// build) builds it itself.
package buildmigrate
