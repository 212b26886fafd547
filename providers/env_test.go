package providers_test

import (
	"slices"
	"testing"

	"github.com/homelab-migrate/migrate/providers"
)

func TestEnvironWithoutSecrets(t *testing.T) {
	t.Setenv("MIGRATE_VAR_tok", "s3cret")
	t.Setenv("MIGRATE_AGE_IDENTITY", "AGE-SECRET-KEY-1X")
	t.Setenv("MIGRATE_PLUGIN_DIR", "/plugins")
	t.Setenv("PLAIN", "yes")
	env := providers.Environ()
	for _, kv := range env {
		if kv == "MIGRATE_VAR_tok=s3cret" || kv == "MIGRATE_AGE_IDENTITY=AGE-SECRET-KEY-1X" {
			t.Errorf("Environ() kept %s", kv)
		}
	}
	for _, want := range []string{"PLAIN=yes", "MIGRATE_PLUGIN_DIR=/plugins"} {
		if !slices.Contains(env, want) {
			t.Errorf("Environ() lost %s", want)
		}
	}
	kept := providers.Environ(providers.AgeIdentityEnv)
	if !slices.Contains(kept, "MIGRATE_AGE_IDENTITY=AGE-SECRET-KEY-1X") || slices.Contains(kept, "MIGRATE_VAR_tok=s3cret") {
		t.Errorf("Environ(AgeIdentityEnv) = %v", kept)
	}
}
