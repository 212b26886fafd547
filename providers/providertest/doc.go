// Package providertest is the conformance suite every provider passes, the
// fake included (after Terraform's statemgr.TestFull). A provider's own
// tests call Run with a Harness describing one valid configuration per
// step type; the suite checks the schema and the contract of each call:
// Plan tolerates unknown values and never shows a sensitive value, Apply
// returns outputs of the declared types and honours a cancelled context,
// Read sees what Apply did, Revert undoes it, and bad input gives
// diagnostics rather than panics.
//
// Canary is the secrets test: each provider's tests give it one
// configuration per step type with a secret planted in every sensitive
// input (marked as a sensitive variable marks it); it runs Read, Plan,
// Apply, Read, Revert and InputDigest and walks every field of every
// response by reflection, and the logs, for the secret (Leaks).
//
// Behaviour specific to a provider is tested in its own package.
package providertest
