package agefile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// IdentityEnv names the environment variable holding an age identity
// ("AGE-SECRET-KEY-...") or the path of an identity file. It is the same
// name as providers.AgeIdentityEnv (this package sits below providers).
const IdentityEnv = "MIGRATE_AGE_IDENTITY"

// RecipientsFile is the file, in a runbook's directory, that lists whom
// new encrypted files are sealed to: one recipient per line, # comments.
const RecipientsFile = ".age-recipients"

// Ext is the name ending of encrypted files.
const Ext = ".age"

const binaryHeader = "age-encryption.org/"

// ErrNoIdentity: neither an identity file nor IdentityEnv was given.
var ErrNoIdentity = errors.New("no age identity: set " + IdentityEnv + " to an identity (AGE-SECRET-KEY-1...) or the path of an identity file")

// ErrInvalidIdentity: the identity given does not parse. Its text says
// only what is wrong, never quoting the identity.
var ErrInvalidIdentity = errors.New("the age identity cannot be parsed; it must hold lines such as AGE-SECRET-KEY-1...")

// IsEncrypted reports whether b is an age file, binary or armored.
func IsEncrypted(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return bytes.HasPrefix(t, []byte(binaryHeader)) || IsArmored(t)
}

// IsArmored reports whether b is an armored (text) age file.
func IsArmored(b []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte(armor.Header))
}

// Decrypt opens an age file, binary or armored.
func Decrypt(b []byte, ids ...age.Identity) ([]byte, error) {
	t := bytes.TrimLeft(b, " \t\r\n")
	var r io.Reader = bytes.NewReader(t)
	if IsArmored(t) {
		r = armor.NewReader(r)
	}
	dr, err := age.Decrypt(r, ids...)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(dr)
}

// Encrypt seals b for the recipients; armored output is text (it can sit
// in JSON or be reviewed in a diff), binary is smaller.
func Encrypt(b []byte, armored bool, rs ...age.Recipient) ([]byte, error) {
	if len(rs) == 0 {
		return nil, errors.New("no recipients to encrypt to")
	}
	var buf bytes.Buffer
	var out io.Writer = &buf
	var aw io.WriteCloser
	if armored {
		aw = armor.NewWriter(&buf)
		out = aw
	}
	w, err := age.Encrypt(out, rs...)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if aw != nil {
		if err := aw.Close(); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Identities loads the identities from path, or when path is "" from
// IdentityEnv (an identity itself, or a path). With neither it returns
// ErrNoIdentity. Errors never quote the identity.
func Identities(path string) ([]age.Identity, error) {
	var text []byte
	switch env := strings.TrimSpace(os.Getenv(IdentityEnv)); {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the age identity file: %w", err)
		}
		text = b
	case strings.HasPrefix(env, "AGE-SECRET-KEY-"):
		text = []byte(env)
	case env != "":
		b, err := os.ReadFile(env)
		if err != nil {
			return nil, fmt.Errorf("%s names a file that cannot be read: %w", IdentityEnv, err)
		}
		text = b
	default:
		return nil, ErrNoIdentity
	}
	ids, err := age.ParseIdentities(bytes.NewReader(text))
	if err != nil {
		// The parser's error may quote the file; say only what is wrong.
		return nil, ErrInvalidIdentity
	}
	return ids, nil
}

// RecipientOf returns the recipient of an identity migrate can encrypt
// to (X25519 or hybrid), or nil.
func RecipientOf(id age.Identity) age.Recipient {
	switch k := id.(type) {
	case *age.X25519Identity:
		return k.Recipient()
	case *age.HybridIdentity:
		return k.Recipient()
	}
	return nil
}

// Recipients reads a recipients file (RecipientsFile): one recipient per
// line, blank lines and # comments ignored. Errors name the file and line.
func Recipients(path string) ([]age.Recipient, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []age.Recipient
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := age.ParseX25519Recipient(line)
		if err != nil {
			hr, herr := age.ParseHybridRecipient(line)
			if herr != nil {
				return nil, fmt.Errorf("%s:%d: not an age recipient (age1...): %v", path, n, err)
			}
			rs = append(rs, hr)
			continue
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s lists no recipients: add a line such as age1... (age-keygen -y on an identity prints its recipient)", path)
	}
	return rs, nil
}

// RunbookRecipients reads RecipientsFile in a runbook directory.
func RunbookRecipients(dir string) ([]age.Recipient, error) {
	p := filepath.Join(dir, RecipientsFile)
	rs, err := Recipients(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s in %s: list whom encrypted files are sealed to, one age1... recipient per line", RecipientsFile, dir)
	}
	return rs, err
}

// ReadFile reads path, decrypting it when it is age-encrypted (whatever
// its name); ids are loaded lazily by load only then.
func ReadFile(path string, load func() ([]age.Identity, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil || !IsEncrypted(b) {
		return b, err
	}
	ids, err := load()
	if err != nil {
		return nil, fmt.Errorf("%s is age-encrypted: %w", path, err)
	}
	out, err := Decrypt(b, ids...)
	if err != nil {
		return nil, fmt.Errorf("decrypting %s: %w", path, err)
	}
	return out, nil
}
