package providers

import (
	"os"
	"slices"
	"strings"
)

// Environment variables of migrate's own that may carry a secret. Step
// commands and provider programs do not inherit them: a command that needs
// one gets it explicitly (an exec step's env), a provider program names
// the ones it reads (plugin.Program.Env).
const (
	// VarEnvPrefix starts the variables that set runbook variables
	// (MIGRATE_VAR_token); read by package runbooks.
	VarEnvPrefix = "MIGRATE_VAR_"
	// AgeIdentityEnv holds an age identity or its path; read by the talos
	// and helm providers.
	AgeIdentityEnv = "MIGRATE_AGE_IDENTITY"
)

// secretEnv reports whether KEY=VALUE is one of those variables.
func secretEnv(kv string) (key string, secret bool) {
	key, _, _ = strings.Cut(kv, "=")
	return key, strings.HasPrefix(key, VarEnvPrefix) || key == AgeIdentityEnv
}

// Environ is os.Environ() without migrate's secret-carrying variables,
// except those named in keep.
func Environ(keep ...string) []string {
	env := os.Environ()
	out := env[:0]
	for _, kv := range env {
		if key, secret := secretEnv(kv); !secret || slices.Contains(keep, key) {
			out = append(out, kv)
		}
	}
	return out
}
