// Package canary plants secrets shaped to slip past a scrubber (a quote,
// a backslash, &<>, spaces, a newline, unicode, five bytes:
// providertest.Canaries) in a runbook's sensitive variable, runs the real
// migrate through plan --out, run --plan --json, run, status, state show
// and rollback with every step type of the local provider, and looks for
// each secret, in clear and in every encoding (providertest.Encodings),
// in every artefact: the state directory, the logs, the saved plan, the
// standard output and error of every command.
//
// The other providers' step types are covered by their own canary
// tests (providertest.Canary with the same table), against the lab, the
// real Incus daemon and the Kubernetes servers, the talos and helm ones
// through the plugin pipe with the program's standard error.
package canary
