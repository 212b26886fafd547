package phases

import (
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Address names a step or check uniquely in a runbook: TYPE.NAME, as in
// "exec.backup" or "talos_kubeconfig.main".
type Address struct {
	Type string
	Name string
}

func (a Address) String() string { return a.Type + "." + a.Name }

// IsZero reports whether a is the empty address.
func (a Address) IsZero() bool { return a.Type == "" && a.Name == "" }

// Name is a name as the runbook keeps it: normalized to NFC, so a name
// typed on the command line (--phase café) matches the one declared
// whatever the keyboard composed.
func Name(s string) string { return norm.NFC.String(s) }

// ParseAddress parses "TYPE.NAME". Names may not contain dots. Like the
// runbook's names, the address is normalized to NFC, so that "café"
// typed with a combining accent is the step declared with "é".
func ParseAddress(s string) (Address, error) {
	typ, name, ok := strings.Cut(norm.NFC.String(s), ".")
	if !ok || typ == "" || name == "" || strings.Contains(name, ".") {
		return Address{}, fmt.Errorf("invalid step address %q: want TYPE.NAME, e.g. exec.backup", s)
	}
	return Address{Type: typ, Name: name}, nil
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
