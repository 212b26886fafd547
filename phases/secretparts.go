package phases

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// SecretParts is a cty mark a provider puts, beside SensitiveMark, on a
// sensitive string that is a document whose secret material it knows part
// by part: a Talos machine config is secret for its keys and tokens, while
// most of its words (host names, paths, the API endpoint) are not. A
// scrubber learns such a string whole, in all its forms, and each part,
// instead of every word of it (secret.Scrubber.AddMarked): so the keys are
// scrubbed wherever they turn up, and the node's name is not.
//
// The mark describes one text: a value that carries it but is another
// text (the document interpolated into a longer string, or transformed)
// is learned as any other secret, word by word.
type SecretParts struct {
	// Of is the SHA-256 (hex) of the text the parts were found in.
	Of string
	// parts are the secrets, NUL-separated: a mark must be comparable.
	parts string
}

// NewSecretParts is the mark of text, whose secrets are parts.
func NewSecretParts(text string, parts []string) SecretParts {
	var keep []string
	for _, p := range parts {
		if p != "" && !strings.Contains(p, "\x00") {
			keep = append(keep, p)
		}
	}
	return SecretParts{Of: DigestText(text), parts: strings.Join(keep, "\x00")}
}

// Parts lists the secrets of the text the mark describes.
func (m SecretParts) Parts() []string {
	if m.parts == "" {
		return nil
	}
	return strings.Split(m.parts, "\x00")
}

// Describes reports whether the mark was made for text.
func (m SecretParts) Describes(text string) bool { return m.Of == DigestText(text) }

// DigestText is the SHA-256 of text in hex, as SecretParts.Of holds it.
func DigestText(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}
