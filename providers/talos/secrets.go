package talos

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// IdentityEnv names the environment variable holding an age identity
// ("AGE-SECRET-KEY-...") or the path of an identity file.
const IdentityEnv = "MIGRATE_AGE_IDENTITY"

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
// the talosconfig's key, the age identity, and the step's sensitive values.
type scrubber struct {
	mu   sync.Mutex
	list []string
	rep  *strings.Replacer
}

// minSecret is the shortest string worth scrubbing: shorter ones appear in
// text by chance.
const minSecret = 6

func (s *scrubber) add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, x := range secrets {
		x = strings.TrimSpace(x)
		if len(x) < minSecret {
			continue
		}
		dup := false
		for _, y := range s.list {
			if y == x {
				dup = true
				break
			}
		}
		if !dup {
			s.list = append(s.list, x)
			changed = true
		}
	}
	if changed {
		sort.Slice(s.list, func(i, j int) bool { return len(s.list[i]) > len(s.list[j]) })
		pairs := make([]string, 0, 2*len(s.list))
		for _, x := range s.list {
			pairs = append(pairs, x, phases.Redacted)
		}
		s.rep = strings.NewReplacer(pairs...)
	}
}

// addPEM adds a PEM key in every form it may be shown: base64 of the whole
// PEM (as in a machine config) and the lines of its body.
func (s *scrubber) addPEM(pem []byte) {
	if len(pem) == 0 {
		return
	}
	s.add(base64.StdEncoding.EncodeToString(pem))
	for _, line := range strings.Split(string(pem), "\n") {
		if !strings.HasPrefix(line, "-----") {
			s.add(line)
		}
	}
}

// addBundle adds every secret of a secrets bundle; certificates stay.
func (s *scrubber) addBundle(b *secrets.Bundle) {
	if b.Cluster != nil {
		s.add(b.Cluster.Secret)
	}
	if b.Secrets != nil {
		s.add(b.Secrets.BootstrapToken, b.Secrets.AESCBCEncryptionSecret, b.Secrets.SecretboxEncryptionSecret)
	}
	if b.TrustdInfo != nil {
		s.add(b.TrustdInfo.Token)
	}
	if c := b.Certs; c != nil {
		if c.Etcd != nil {
			s.addPEM(c.Etcd.Key)
		}
		if c.K8s != nil {
			s.addPEM(c.K8s.Key)
		}
		if c.K8sAggregator != nil {
			s.addPEM(c.K8sAggregator.Key)
		}
		if c.K8sServiceAccount != nil {
			s.addPEM(c.K8sServiceAccount.Key)
		}
		if c.OS != nil {
			s.addPEM(c.OS.Key)
		}
	}
}

// addMarked adds every string of v marked sensitive.
func (s *scrubber) addMarked(v cty.Value) {
	var found []string
	_ = cty.Walk(v, func(_ cty.Path, x cty.Value) (bool, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return true, nil
		}
		plain, _ := x.UnmarkDeep()
		_ = cty.Walk(plain, func(_ cty.Path, y cty.Value) (bool, error) {
			if y.Type() == cty.String && y.IsKnown() && !y.IsNull() {
				found = append(found, y.AsString())
			}
			return true, nil
		})
		return true, nil
	})
	s.add(found...)
}

// text scrubs known secrets and lines that carry secret fields.
func (s *scrubber) text(t string) string {
	if t == "" {
		return t
	}
	s.mu.Lock()
	rep := s.rep
	s.mu.Unlock()
	if rep != nil {
		t = rep.Replace(t)
	}
	return redactSecretLines(t)
}

func (s *scrubber) diags(d phases.Diagnostics) phases.Diagnostics {
	for i := range d {
		d[i].Summary = s.text(d[i].Summary)
		d[i].Detail = s.text(d[i].Detail)
	}
	return d
}

// secretLine matches a YAML (or diff of YAML) line whose key holds a
// secret in a Talos machine config: private keys, tokens, secrets.
var secretLine = regexp.MustCompile(`(?im)^([-+ ]?\s*(?:-\s+)?(?:key|token|secret|bootstrapToken|[a-z]*EncryptionSecret|password|privateKey|private-key)\s*:\s*)("?[A-Za-z0-9+/=._:\-]{6,}"?)\s*$`)

// redactSecretLines replaces the values of secret fields, so that a diff
// between configs of different bundles shows no key in clear either.
func redactSecretLines(t string) string {
	return secretLine.ReplaceAllString(t, "${1}"+phases.Redacted)
}

// logWriter is the step's log with secrets scrubbed, line by line.
type logWriter struct {
	mu    sync.Mutex
	w     io.Writer
	buf   []byte
	scrub *scrubber
}

func newLogWriter(w io.Writer, s *scrubber) *logWriter {
	if w == nil {
		w = io.Discard
	}
	return &logWriter{w: w, scrub: s}
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i+1])
		l.buf = l.buf[i+1:]
		_, _ = io.WriteString(l.w, l.scrub.text(line))
	}
	return len(p), nil
}

// Printf writes one line.
func (l *logWriter) Printf(format string, args ...any) {
	fmt.Fprintf(l, format+"\n", args...)
}

// Flush writes what is left without a newline.
func (l *logWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		_, _ = io.WriteString(l.w, l.scrub.text(string(l.buf)))
		l.buf = nil
	}
}
