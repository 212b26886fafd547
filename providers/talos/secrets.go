package talos

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strings"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// IdentityEnv names the environment variable holding an age identity
// ("AGE-SECRET-KEY-...") or the path of an identity file.
const IdentityEnv = providers.AgeIdentityEnv

// encrypt seals b for the recipient, armored so that it sits in JSON.
func encrypt(b []byte, r age.Recipient) (string, error) {
	out, err := agefile.Encrypt(b, true, r)
	return string(out), err
}

// loadIdentity finds the age identity: the age_identity file, else
// MIGRATE_AGE_IDENTITY (an identity or a path). With none, why says so.
func loadIdentity(path string, errf func(summary, format string, args ...any)) (id age.Identity, r age.Recipient, why string) {
	ids, err := agefile.Identities(path)
	switch {
	case errors.Is(err, agefile.ErrNoIdentity):
		return nil, nil, "neither age_identity nor " + IdentityEnv + " is set"
	case errors.Is(err, agefile.ErrInvalidIdentity):
		errf("Invalid Age Identity", "The age identity cannot be parsed; it must hold lines such as AGE-SECRET-KEY-1...")
		return nil, nil, "the identity is invalid"
	case err != nil:
		msg := err.Error()
		errf("Cannot Read Age Identity", "%s%s.", strings.ToUpper(msg[:1]), msg[1:])
		return nil, nil, "the identity file cannot be read"
	}
	for _, x := range ids {
		if r := agefile.RecipientOf(x); r != nil {
			return x, r, ""
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

// secretLine matches a YAML (or diff of YAML, indented in a plan) line
// whose key holds a secret in a Talos machine config: private keys,
// tokens, secrets, passwords.
var secretLine = regexp.MustCompile(`(?im)^(\s*[-+ ]?\s*(?:-\s+)?(?:key|token|secret|bootstrapToken|[a-z]*EncryptionSecret|password|privateKey|private-key)\s*:\s*)("?[A-Za-z0-9+/=._:\-]{6,}"?)\s*$`)

// redactSecretLines replaces the values of secret fields, so that a diff
// between configs of different bundles shows no key in clear either.
func redactSecretLines(t string) string {
	return secretLine.ReplaceAllString(t, "${1}"+phases.Redacted)
}
