package agefile

import (
	"crypto/hmac"
	"crypto/sha256"

	"filippo.io/age"
)

// InputHashKey is the key of the input hashes the state and saved plans
// keep (engine.Options.InputKey), derived from the age identity that
// opens the runbook's secrets: every runner of a runbook with secrets has
// it, and a copy of the state or of a plan does not, so a weak secret
// cannot be guessed from its hash. Without an identity it is nil and the
// hashes are plain SHA-256 (README, "Secrets"). The first of ids that is
// a key (X25519 or hybrid) is used; another identity keys them anew.
//
// The derivation is part of the state's format: the hashes stored by
// earlier runs must stay valid (TestInputHashKeyGolden).
func InputHashKey(ids ...age.Identity) []byte {
	for _, id := range ids {
		if RecipientOf(id) == nil {
			continue
		}
		secret, ok := id.(interface{ String() string })
		if !ok {
			continue
		}
		mac := hmac.New(sha256.New, []byte(secret.String()))
		mac.Write([]byte("migrate input hash key v1"))
		return mac.Sum(nil)
	}
	return nil
}
