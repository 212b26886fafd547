package kubecp

import (
	"strings"
	"testing"
)

// TestEncryptionConfig: the providers in Talos' order (secretbox writes,
// aescbc of an older config still reads, identity reads what was never
// encrypted); an older config with aescbc only encrypts with it.
func TestEncryptionConfig(t *testing.T) {
	const key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" // 32 bytes

	for _, tc := range []struct {
		secretbox, aescbc string
		order             []string
	}{
		{key, key, []string{"- secretbox:", "- aescbc:", "- identity: {}"}},
		{"", key, []string{"- aescbc:", "- identity: {}"}},
		{key, "", []string{"- secretbox:", "- identity: {}"}},
	} {
		b, err := encryptionConfig(tc.secretbox, tc.aescbc)
		if err != nil {
			t.Fatal(err)
		}

		s, at := string(b), 0
		for _, want := range tc.order {
			i := strings.Index(s[at:], want)
			if i < 0 {
				t.Errorf("secretbox %q aescbc %q: no %q after byte %d in\n%s", tc.secretbox, tc.aescbc, want, at, s)

				break
			}

			at += i + len(want)
		}

		if tc.aescbc == "" && strings.Contains(s, "aescbc") || tc.secretbox == "" && strings.Contains(s, "secretbox") {
			t.Errorf("a provider without its key:\n%s", s)
		}
	}

	if _, err := encryptionConfig("", "bm90IDMyIGJ5dGVz"); err == nil || !strings.Contains(err.Error(), "cluster.aescbcEncryptionSecret is not 32 bytes") {
		t.Errorf("a short aescbc key: %v", err)
	}
}
