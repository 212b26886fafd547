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
		{Group: "app", Type: "exec", Name: "backup"},
		{Group: "app", GroupKey: "jellyfin", Type: "exec", Name: "backup"},
		{Group: "app", GroupKey: `a "b"].c`, Type: "exec", Name: "backup", Key: "x.y"},
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

func TestGroupAddress(t *testing.T) {
	a := Address{Group: "app", GroupKey: "jellyfin", Type: "helm_release", Name: "app", Key: "k"}
	if got := a.String(); got != `group.app["jellyfin"].helm_release.app["k"]` {
		t.Errorf("String() = %s", got)
	}
	if got := a.GroupPrefix(); got != `group.app["jellyfin"]` {
		t.Errorf("GroupPrefix() = %s", got)
	}
	if got := a.Base(); got.Key != "" || got.Group != "app" || got.GroupKey != "jellyfin" {
		t.Errorf("Base() = %#v: the call's key stays, the step's goes", got)
	}
	if got := a.Local(); got != (Address{Type: "helm_release", Name: "app", Key: "k"}) {
		t.Errorf("Local() = %#v", got)
	}
}

func TestParseAddressRefusesBadKeys(t *testing.T) {
	for _, s := range []string{`exec.x[""]`, `exec.x[photos]`, `exec.x["a"`, `exec.x["a"]x`, `exec["a"]`, `exec.x[0]`,
		`group.exec.x`, `group..exec.x`, `group.app[""].exec.x`, `group.app[app].exec.x`, `group.app["a"]exec.x`,
		`group.app["a"`, `group.a.group.b.exec.x`, `group.app`, `group.app.exec`} {
		if a, err := ParseAddress(s); err == nil {
			t.Errorf("ParseAddress(%q) = %#v, want an error", s, a)
		}
	}
}

func FuzzAddress(f *testing.F) {
	for _, s := range []string{"exec", "backup", "photos", `a"b\c`, "", "é", "[x]"} {
		f.Add("exec", "backup", s)
	}
	f.Add("group.app", "backup", "k")
	f.Fuzz(func(t *testing.T, typ, name, key string) {
		a := Address{Type: typ, Name: name, Key: key}
		if g, ok := strings.CutPrefix(typ, "group."); ok {
			// A group call named by the rest, keyed by the key.
			a = Address{Group: g, GroupKey: key, Type: "exec", Name: name}
			typ = g
		}
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
