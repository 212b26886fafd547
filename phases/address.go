package phases

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Address names a step or check uniquely in a runbook: TYPE.NAME, as in
// "exec.backup" or "talos_kubeconfig.main", and for one instance of a step
// with for_each TYPE.NAME["KEY"], as in exec.export["nextcloud"].
type Address struct {
	Type string
	Name string
	// Key is the for_each key of one instance; "" for a step without
	// for_each (an instance's key is never empty).
	Key string
}

// String renders TYPE.NAME, or TYPE.NAME["KEY"] with the key quoted as
// in HCL and Go (\" and \\ escaped), which ParseAddress reads back.
// (Small enough to inline: a comparison of two addresses' strings then
// allocates nothing, as sorting big runbooks' dependencies does.)
func (a Address) String() string {
	if a.Key == "" {
		return a.Type + "." + a.Name
	}
	return a.keyed()
}

func (a Address) keyed() string { return a.Type + "." + a.Name + "[" + strconv.Quote(a.Key) + "]" }

// Base is the address of the step block: the address without its key.
func (a Address) Base() Address { return Address{Type: a.Type, Name: a.Name} }

// IsZero reports whether a is the empty address.
func (a Address) IsZero() bool { return a.Type == "" && a.Name == "" && a.Key == "" }

// Name is a name as the runbook keeps it: normalized to NFC, so a name
// typed on the command line (--phase café) matches the one declared
// whatever the keyboard composed.
func Name(s string) string { return norm.NFC.String(s) }

// ParseAddress parses "TYPE.NAME" or "TYPE.NAME[\"KEY\"]". Names may not
// contain dots; the key is a quoted string (Go/HCL escapes) and not
// empty. Like the runbook's names, the address is normalized to NFC, so
// that "café" typed with a combining accent is the step declared with "é".
func ParseAddress(s string) (Address, error) {
	s = norm.NFC.String(s)
	base, key := s, ""
	if i := strings.IndexByte(s, '['); i >= 0 {
		if !strings.HasSuffix(s, "]") {
			return Address{}, fmt.Errorf("invalid step address %q: a key is written TYPE.NAME[\"KEY\"], e.g. exec.backup[\"photos\"]", s)
		}
		k, err := strconv.Unquote(s[i+1 : len(s)-1])
		if err != nil || !strings.HasPrefix(s[i+1:], `"`) {
			return Address{}, fmt.Errorf("invalid step address %q: the key must be a quoted string, as in exec.backup[\"photos\"]", s)
		}
		if k == "" {
			return Address{}, fmt.Errorf("invalid step address %q: a for_each key is never empty", s)
		}
		base, key = s[:i], norm.NFC.String(k)
	}
	typ, name, ok := strings.Cut(base, ".")
	if !ok || typ == "" || name == "" || strings.Contains(name, ".") {
		return Address{}, fmt.Errorf("invalid step address %q: want TYPE.NAME, e.g. exec.backup", s)
	}
	return Address{Type: typ, Name: name, Key: key}, nil
}

// MarshalText lets addresses be map keys and strings in JSON.
func (a Address) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText is the revert data of MarshalText.
func (a *Address) UnmarshalText(b []byte) error {
	p, err := ParseAddress(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}
