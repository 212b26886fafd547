package phases

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestAddressKeyRoundTrip(t *testing.T) {
	for _, a := range []Address{
		{Type: "exec", Name: "backup"},
		{Type: "exec", Name: "backup", Key: "photos"},
		{Type: "exec", Name: "backup", Key: `a "quoted" \ key`},
		{Type: "exec", Name: "backup", Key: "dots.and[brackets]"},
		{Type: "exec", Name: "backup", Key: "line\nbreak\ttab"},
	} {
		s := a.String()
		got, err := ParseAddress(s)
		if err != nil || got != a {
			t.Errorf("ParseAddress(%q) = %#v, %v; want %#v", s, got, err, a)
		}
	}
	if got := (Address{Type: "exec", Name: "x", Key: `say "hi"\`}).String(); got != `exec.x["say \"hi\"\\"]` {
		t.Errorf("String() = %s", got)
	}
}

func TestParseAddressRefusesBadKeys(t *testing.T) {
	for _, s := range []string{`exec.x[""]`, `exec.x[photos]`, `exec.x["a"`, `exec.x["a"]x`, `exec["a"]`, `exec.x[0]`} {
		if a, err := ParseAddress(s); err == nil {
			t.Errorf("ParseAddress(%q) = %#v, want an error", s, a)
		}
	}
}

func FuzzAddress(f *testing.F) {
	for _, s := range []string{"exec", "backup", "photos", `a"b\c`, "", "é", "[x]"} {
		f.Add("exec", "backup", s)
	}
	f.Fuzz(func(t *testing.T, typ, name, key string) {
		a := Address{Type: typ, Name: name, Key: key}
		got, err := ParseAddress(a.String())
		valid := typ != "" && name != "" && !strings.ContainsAny(typ+name, ".[") &&
			utf8.ValidString(typ+name+key) && norm.NFC.IsNormalString(typ+name+key)
		if !valid {
			if err == nil {
				// Whatever parses must print back to itself.
				if again, err := ParseAddress(got.String()); err != nil || again != got {
					t.Fatalf("%q parsed as %#v, which does not round-trip", a.String(), got)
				}
			}
			return
		}
		if err != nil || got != a {
			t.Fatalf("ParseAddress(%q) = %#v, %v; want %#v", a.String(), got, err, a)
		}
	})
}
