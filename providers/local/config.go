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
// not known yet show as such; sensitive ones are left to the SDK, which
// scrubs them out of whatever leaves the provider.
func showArgv(c *call, attr string, argv []string) string {
	if argv == nil && c.Unknown(attr) {
		return sdk.UnknownText
	}
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == sdk.UnknownText && c.Unknown(attr, i) {
			b.WriteString(a)
			continue
		}
		b.WriteString(shellQuote(a))
	}
	return b.String()
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
