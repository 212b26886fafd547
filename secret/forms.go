package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// forms are the texts a secret x can turn into on its way out, each
// scrubbed like x itself: defence in depth behind the providers, which
// replace a sensitive value before they quote, join or encode it. Forms
// equal to x or empty are left out by the caller.
func forms(x string) []string {
	return append(wholeForms(x), pieces(x)...)
}

// wholeForms are the forms of x as a whole, without its words: those of
// a document whose secret parts are known one by one (phases.SecretParts).
func wholeForms(x string) []string {
	out := []string{x}
	out = append(out, escaped(x)...)
	out = append(out, shellQuoted(x)...)
	out = append(out, base64Forms(x)...)
	out = append(out, urlForms(x)...)
	if strings.Contains(x, "\n") {
		out = append(out, strings.ReplaceAll(x, "\n", "\r\n")) // through a terminal
	}
	return out
}

// escaped are x inside a Go %q, a JSON string (with and without the HTML
// escapes of \u0026, \u003c and \u003e) and an ASCII-only JSON or Go
// string (\u00e9): without their quotes, since x may be a part of the
// quoted text.
func escaped(x string) []string {
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(x)
	html, _ := json.Marshal(x)
	return []string{
		unquote(strconv.Quote(x)),
		unquote(strconv.QuoteToASCII(x)),
		unquote(strings.TrimSuffix(plain.String(), "\n")),
		unquote(string(html)),
	}
}

func unquote(q string) string { return q[1 : len(q)-1] }

// shellQuoted are x as a POSIX shell quotes it between single quotes
// (providers/local and providers/incus show an argv so) and between
// double quotes, without the outer quotes, since x may be a part of a
// longer quoted word:
//
//	'echo P@ss'\''w0rd'
func shellQuoted(x string) []string {
	double := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
	return []string{strings.ReplaceAll(x, "'", `'\''`), double.Replace(x)}
}

// base64Forms are x in standard and URL base64, and, for a secret long
// enough that its characters cannot turn up by chance, without padding
// and the characters that depend on x alone when it is a
// part of a longer encoded stream, at each of its three alignments
// (a tar or a config file encoded whole, a certificate inside a
// kubeconfig).
func base64Forms(x string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		padded := enc.EncodeToString([]byte(x))
		out = append(out, padded)
		if len(x) < MinPiece {
			continue // shorter, the forms below turn up in any long base64
		}
		out = append(out, strings.TrimRight(padded, "="))
		for offset := range 3 {
			out = append(out, aligned(enc, x, offset))
		}
	}
	return out
}

// aligned is the part of the encoding of x, preceded by offset bytes in
// a stream, that the bytes around x do not change: the characters whose
// six bits all come from x.
func aligned(enc *base64.Encoding, x string, offset int) string {
	b := make([]byte, offset+len(x)+2)
	copy(b[offset:], x)
	s := enc.EncodeToString(b)
	from := (8*offset + 5) / 6
	to := 8 * (offset + len(x)) / 6
	return s[from:to]
}

// urlForms are x in a URL's query (space as +, or %20) and in its path.
func urlForms(x string) []string {
	q := url.QueryEscape(x)
	return []string{q, strings.ReplaceAll(q, "+", "%20"), url.PathEscape(x)}
}

// MinPiece is the shortest word of a longer secret that is scrubbed on
// its own. A sensitive value often reaches a command inside a larger
// string ("sh -c 'echo ${upper(var.tok)}'"), and the command prints only
// the derived word: that word is as secret as the whole. Shorter words
// ("sh", "echo", "exit") would redact ordinary text.
const MinPiece = 8

// pieces are the words of a secret that holds separators (white space,
// quotes, shell punctuation, '='), at least MinPiece bytes long.
func pieces(x string) []string {
	words := strings.FieldsFunc(x, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune("\"'`;|&<>()=,", r)
	})
	if len(words) < 2 {
		return nil
	}
	var out []string
	for _, w := range words {
		if len(w) >= MinPiece {
			out = append(out, w)
		}
	}
	return out
}
