package secret

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Visible returns t with the control characters a terminal obeys made
// visible as Go escapes (ESC as \x1b, CR as \r, CSI as \u009b), but for newlines
// and tabs: what a command or a guest prints may move the cursor, set
// the window's title, rewrite what was shown before or answer back
// through the terminal, and is shown as text instead. Bytes that are not
// UTF-8 (a lone 0x9b is a CSI to an 8-bit terminal) are escaped too.
func Visible(t string) string {
	if !needsEscape(t) {
		return t
	}
	var b strings.Builder
	b.Grow(len(t) + 16)
	for i := 0; i < len(t); {
		r, size := utf8.DecodeRuneInString(t[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, t[i])
		case isControl(r):
			q := strconv.QuoteRune(r) // '\x1b', '\r', '\u009b'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(t[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isControl: C0 but newline and tab, DEL, and C1.
func isControl(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f
}

func needsEscape(t string) bool {
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			return true
		}
		if c >= utf8.RuneSelf {
			return !utf8.ValidString(t[i:]) || strings.ContainsFunc(t[i:], isControl)
		}
	}
	return false
}
