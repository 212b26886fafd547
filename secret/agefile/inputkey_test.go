package agefile

import (
	"encoding/hex"
	"testing"

	"filippo.io/age"
)

// goldenIdentity is an identity made for this test only: it seals nothing.
const goldenIdentity = "AGE-SECRET-KEY-1GL79JAY4C5RF6SPTNT8MS02J2KD03CF7230XC5XSERGSVSAANDXSQANJRF"

// TestInputHashKeyGolden: the key of goldenIdentity is the one migrate
// 6338491 derived (cmd/migrate's inputKey, computed on that code), so the
// keyed input hashes of states and saved plans written since stay valid.
func TestInputHashKeyGolden(t *testing.T) {
	id, err := age.ParseX25519Identity(goldenIdentity)
	if err != nil {
		t.Fatal(err)
	}
	const want = "4f73818b2aaabf2ebc7f78cb00944b015d888c237fb63cc7c1cebfcb2553eb4e"
	if got := hex.EncodeToString(InputHashKey(id)); got != want {
		t.Errorf("InputHashKey = %s, want %s: every stored input hash would read as changed", got, want)
	}
	// Through the environment, as migrate reads it.
	t.Setenv(IdentityEnv, goldenIdentity)
	ids, err := Identities("")
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(InputHashKey(ids...)); got != want {
		t.Errorf("InputHashKey(Identities) = %s, want %s", got, want)
	}
	// The first identity that is a key counts; none gives no key.
	other, _ := age.GenerateX25519Identity()
	if got := hex.EncodeToString(InputHashKey(id, other)); got != want {
		t.Errorf("the first identity does not key the hashes: %s", got)
	}
	if k := InputHashKey(); k != nil {
		t.Errorf("no identity: %x, want nil (plain SHA-256)", k)
	}
	if k := InputHashKey(passphraseOnly{}); k != nil {
		t.Errorf("an identity that is no key: %x, want nil", k)
	}
}

// passphraseOnly is an identity that is not a key (as age's scrypt one).
type passphraseOnly struct{}

func (passphraseOnly) Unwrap([]*age.Stanza) ([]byte, error) { return nil, age.ErrIncorrectIdentity }
