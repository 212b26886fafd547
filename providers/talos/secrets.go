package talos

import (
	"bytes"
	"encoding/base64"
	"io"
	"os"
	"regexp"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
)

// IdentityEnv names the environment variable holding an age identity
// ("AGE-SECRET-KEY-...") or the path of an identity file.
const IdentityEnv = providers.AgeIdentityEnv

const ageHeader = "age-encryption.org/"

// isAgeEncrypted reports whether b is an age file, binary or armored.
func isAgeEncrypted(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return bytes.HasPrefix(t, []byte(ageHeader)) || bytes.HasPrefix(t, []byte(armor.Header))
}

func decrypt(b []byte, id age.Identity) ([]byte, error) {
	var r io.Reader = bytes.NewReader(bytes.TrimLeft(b, " \t\r\n"))
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(armor.Header)) {
		r = armor.NewReader(r)
	}
	dr, err := age.Decrypt(r, id)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(dr)
}

// encrypt seals b for the recipient, armored so that it sits in JSON.
func encrypt(b []byte, r age.Recipient) (string, error) {
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, r)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(b); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	if err := aw.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// loadIdentity finds the age identity: the age_identity file, else
// MIGRATE_AGE_IDENTITY (an identity or a path). With none, why says so.
func loadIdentity(path string, errf func(summary, format string, args ...any)) (id age.Identity, r age.Recipient, why string) {
	var text []byte
	switch env := strings.TrimSpace(os.Getenv(IdentityEnv)); {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			errf("Cannot Read Age Identity", "Reading the age identity file: %v.", err)
			return nil, nil, "the identity file cannot be read"
		}
		text = b
	case strings.HasPrefix(env, "AGE-SECRET-KEY-"):
		text = []byte(env)
	case env != "":
		b, err := os.ReadFile(env)
		if err != nil {
			errf("Cannot Read Age Identity", "%s names a file that cannot be read: %v.", IdentityEnv, err)
			return nil, nil, "the identity file cannot be read"
		}
		text = b
	default:
		return nil, nil, "neither age_identity nor " + IdentityEnv + " is set"
	}
	ids, err := age.ParseIdentities(bytes.NewReader(text))
	if err != nil {
		// The parser's error may quote the file; say only what is wrong.
		errf("Invalid Age Identity", "The age identity cannot be parsed; it must hold lines such as AGE-SECRET-KEY-1...")
		return nil, nil, "the identity is invalid"
	}
	for _, x := range ids {
		switch k := x.(type) {
		case *age.X25519Identity:
			return k, k.Recipient(), ""
		case *age.HybridIdentity:
			return k, k.Recipient(), ""
		}
	}
	return ids[0], nil, "the identity has no recipient that migrate can encrypt to"
}

// scrubber replaces secrets in text: the secrets bundle's keys and tokens,
// the talosconfig's key, the age identity, and the step's sensitive values;
// its Filter also blanks the values of secret fields in YAML.
type scrubber = secret.Scrubber

// minSecret is the shortest string worth scrubbing: shorter ones appear in
// text by chance.
const minSecret = 6

func newScrubber() *scrubber { return &scrubber{Min: minSecret, Filter: redactSecretLines} }

// addPEM adds a PEM key in every form it may be shown: base64 of the whole
// PEM (as in a machine config) and the lines of its body.
func addPEM(s *scrubber, pem []byte) {
	if len(pem) == 0 {
		return
	}
	s.Add(base64.StdEncoding.EncodeToString(pem))
	for _, line := range strings.Split(string(pem), "\n") {
		if !strings.HasPrefix(line, "-----") {
			s.Add(strings.TrimSpace(line))
		}
	}
}

// addBundle adds every secret of a secrets bundle; certificates stay.
func addBundle(s *scrubber, b *secrets.Bundle) {
	if b.Cluster != nil {
		s.Add(b.Cluster.Secret)
	}
	if b.Secrets != nil {
		s.Add(b.Secrets.BootstrapToken, b.Secrets.AESCBCEncryptionSecret, b.Secrets.SecretboxEncryptionSecret)
	}
	if b.TrustdInfo != nil {
		s.Add(b.TrustdInfo.Token)
	}
	if c := b.Certs; c != nil {
		if c.Etcd != nil {
			addPEM(s, c.Etcd.Key)
		}
		if c.K8s != nil {
			addPEM(s, c.K8s.Key)
		}
		if c.K8sAggregator != nil {
			addPEM(s, c.K8sAggregator.Key)
		}
		if c.K8sServiceAccount != nil {
			addPEM(s, c.K8sServiceAccount.Key)
		}
		if c.OS != nil {
			addPEM(s, c.OS.Key)
		}
	}
}

// secretLine matches a YAML (or diff of YAML) line whose key holds a
// secret in a Talos machine config: private keys, tokens, secrets.
var secretLine = regexp.MustCompile(`(?im)^([-+ ]?\s*(?:-\s+)?(?:key|token|secret|bootstrapToken|[a-z]*EncryptionSecret|password|privateKey|private-key)\s*:\s*)("?[A-Za-z0-9+/=._:\-]{6,}"?)\s*$`)

// redactSecretLines replaces the values of secret fields, so that a diff
// between configs of different bundles shows no key in clear either.
func redactSecretLines(t string) string {
	return secretLine.ReplaceAllString(t, "${1}"+phases.Redacted)
}
