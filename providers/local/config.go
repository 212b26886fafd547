package local

import (
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// invalid is the diagnostic of an attribute value the schema's type
// allows but the step cannot use.
func invalid(format string, args ...any) phases.Diagnostics {
	return phases.Errorf("Invalid Attribute Value", format, args...)
}

// showArgv renders an argv as a person would type it in a shell. Values
// not known yet show as such; sensitive ones are redacted before they are
// quoted: once shell-quoted, a secret with a quote in it is no longer the
// text the scrubber knows.
func showArgv(c *call, attr string, argv []string) string {
	if argv == nil && c.Unknown(attr) {
		return sdk.UnknownText
	}
	shown := c.ShownArgv(attr, argv, shellQuote)
	for i, a := range argv {
		if a == sdk.UnknownText && c.Unknown(attr, i) {
			shown[i] = a
		}
	}
	return strings.Join(shown, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
