package secret_test

import (
	"testing"

	"github.com/homelab-migrate/migrate/secret"
)

func TestVisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcode\tand tabs\n": "plain text, ünïcode\tand tabs\n",
		"\x1b]0;title\a\x1b[2J":           `\x1b]0;title\a\x1b[2J`,
		"50%\r100%":                       `50%\r100%`,
		"8-bit CSI \u009b1A, DEL \x7f":    `8-bit CSI \u009b1A, DEL \x7f`,
		"a lone byte \x9b here":           `a lone byte \x9b here`,
	} {
		if got := secret.Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}
