package secret_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret"
)

// canaries are secrets with every character that quoting, escaping or
// encoding changes, and one shorter than a piece.
var canaries = []string{
	`P@ss'w0rd`, `q"uo"te-it`, `back\slash\n`, `a&b<c>d=e`, "with space s3cr",
	"two\nlines-of-it", "ünï©ødé-ß€", "ab'c",
}

// shellQuote quotes as providers/local shows an argv.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestScrubberCatchesEncodedForms: a secret reaches text quoted by a
// shell, escaped in JSON or a Go string, base64- or URL-encoded; each of
// those texts is scrubbed of it.
func TestScrubberCatchesEncodedForms(t *testing.T) {
	t.Parallel()
	for _, c := range canaries {
		var s secret.Scrubber
		s.Add(c)
		jsonHTML, _ := json.Marshal(map[string]string{"k": "pre " + c + " post"})
		var jsonPlain strings.Builder
		enc := json.NewEncoder(&jsonPlain)
		enc.SetEscapeHTML(false)
		enc.Encode(map[string]string{"k": c})
		texts := map[string]string{
			"shell argv":       "printf %s " + shellQuote(c),
			"shell in sh -c":   "sh -c " + shellQuote("echo "+c+" >&2"), // interpolated into a script
			"JSON":             string(jsonHTML),
			"JSON, no HTML":    jsonPlain.String(),
			"Go %q":            fmt.Sprintf("value %q", "x"+c),
			"ASCII %+q":        fmt.Sprintf("value %+q", c),
			"base64":           "data: " + base64.StdEncoding.EncodeToString([]byte(c)),
			"base64 URL":       "data: " + base64.URLEncoding.EncodeToString([]byte(c)),
			"URL query":        "https://h/?" + url.Values{"token": {c}, "user": {"me"}}.Encode(),
			"URL query %20":    "https://h/?token=" + strings.ReplaceAll(url.QueryEscape(c), "+", "%20"),
			"URL path":         "https://h/" + url.PathEscape(c) + "/x",
			"CRLF (terminal)":  "got " + strings.ReplaceAll(c, "\n", "\r\n"),
			"a line around it": "the value is " + c + ".",
		}
		if len(c) >= secret.MinPiece { // shorter, it would turn up in any long base64
			texts["base64 URL, raw"] = "data: " + base64.RawURLEncoding.EncodeToString([]byte(c))
		}
		for name, text := range texts {
			got := s.Text(text)
			if !strings.Contains(got, phases.Redacted) || strings.Contains(got, c) {
				t.Errorf("%q, %s: %q scrubbed to %q", c, name, text, got)
			}
		}
	}
}

// TestScrubberCatchesASecretInsideALongerBase64Stream: a secret inside a
// larger encoded whole (a file, a tar), at each of the three alignments
// base64 has, cannot be decoded from the scrubbed text.
func TestScrubberCatchesASecretInsideALongerBase64Stream(t *testing.T) {
	t.Parallel()
	for _, c := range canaries {
		if len(c) < secret.MinPiece {
			continue // short secrets: their whole encoding only
		}
		var s secret.Scrubber
		s.Add(c)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for k := range 3 {
				stream := strings.Repeat("#", 30+k) + c + strings.Repeat("~", 30)
				got := s.Text(enc.EncodeToString([]byte(stream)))
				if decodes(got, c) {
					t.Errorf("%q at offset %d: it still decodes from %s", c, k, got)
				}
			}
		}
	}
}

// decodes reports whether c can be read back from any run of base64
// characters in text, at any alignment.
func decodes(text, c string) bool {
	for _, run := range strings.FieldsFunc(text, func(r rune) bool {
		return !strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_", r)
	}) {
		for skip := range 4 {
			if skip > len(run) {
				break
			}
			r := run[skip:]
			r = r[:len(r)/4*4]
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				if b, err := enc.DecodeString(r); err == nil && strings.Contains(string(b), c) {
					return true
				}
			}
		}
	}
	return false
}
