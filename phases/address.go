package phases

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Address names a step or check uniquely in a runbook: TYPE.NAME, as in
// "exec.backup" or "talos_kubeconfig.main", and for one instance of a step
// with for_each TYPE.NAME["KEY"], as in exec.export["nextcloud"]. A step
// of a group is prefixed with the group call that made it:
// group.CALL.TYPE.NAME, or group.CALL["KEY"].TYPE.NAME for one instance
// of a call with for_each, as in group.app["jellyfin"].helm_release.app.
type Address struct {
	// Group is the name of the group call that made the step; "" for a
	// step written in a phase.
	Group string
	// GroupKey is the for_each key of the call's instance; "" for a
	// call without for_each.
	GroupKey string
	Type     string
	Name     string
	// Key is the for_each key of one instance; "" for a step without
	// for_each (an instance's key is never empty).
	Key string
}

// String renders TYPE.NAME, or TYPE.NAME["KEY"] with the key quoted as
// in HCL and Go (\" and \\ escaped), prefixed by group.CALL. or
// group.CALL["KEY"]. in a group, which ParseAddress reads back.
// (Small enough to inline: a comparison of two addresses' strings then
// allocates nothing, as sorting big runbooks' dependencies does.)
func (a Address) String() string {
	if a.Key == "" && a.Group == "" {
		return a.Type + "." + a.Name
	}
	return a.long()
}

func (a Address) long() string {
	s := a.Type + "." + a.Name
	if a.Key != "" {
		s += "[" + strconv.Quote(a.Key) + "]"
	}
	if a.Group != "" {
		s = a.GroupPrefix() + "." + s
	}
	return s
}

// GroupPrefix is group.CALL or group.CALL["KEY"], the group instance a
// step belongs to; "" for a step written in a phase.
func (a Address) GroupPrefix() string {
	switch {
	case a.Group == "":
		return ""
	case a.GroupKey == "":
		return "group." + a.Group
	}
	return "group." + a.Group + "[" + strconv.Quote(a.GroupKey) + "]"
}

// Local is the address without its group: how the step is written, and
// referred to, inside the group's files.
func (a Address) Local() Address { return Address{Type: a.Type, Name: a.Name, Key: a.Key} }

// Base is the address of the step block: the address without its key
// (the group call's key stays: each call instance has its own blocks).
func (a Address) Base() Address {
	return Address{Group: a.Group, GroupKey: a.GroupKey, Type: a.Type, Name: a.Name}
}

// IsZero reports whether a is the empty address.
func (a Address) IsZero() bool { return a == Address{} }

// Name is a name as the runbook keeps it: normalized to NFC, so a name
// typed on the command line (--phase café) matches the one declared
// whatever the keyboard composed.
func Name(s string) string { return norm.NFC.String(s) }

// ParseAddress parses "TYPE.NAME" or "TYPE.NAME[\"KEY\"]", optionally
// prefixed with "group.CALL." or "group.CALL[\"KEY\"].". Names may not
// contain dots; a key is a quoted string (Go/HCL escapes) and not
// empty. Like the runbook's names, the address is normalized to NFC, so
// that "café" typed with a combining accent is the step declared with "é".
func ParseAddress(s string) (Address, error) {
	s = norm.NFC.String(s)
	var group, groupKey string
	if rest, ok := strings.CutPrefix(s, "group."); ok {
		var err error
		if group, groupKey, rest, err = parseGroupPrefix(rest); err != nil {
			return Address{}, fmt.Errorf("invalid step address %q: %w", s, err)
		}
		a, err := ParseAddress(rest)
		if err != nil || a.Group != "" {
			return Address{}, fmt.Errorf("invalid step address %q: a step of a group is written group.CALL.TYPE.NAME, e.g. group.app.exec.backup", s)
		}
		a.Group, a.GroupKey = group, groupKey
		return a, nil
	}
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

// parseGroupPrefix reads CALL. or CALL["KEY"]. off the front of s.
func parseGroupPrefix(s string) (name, key, rest string, err error) {
	i := strings.IndexAny(s, ".[")
	if i <= 0 {
		return "", "", "", fmt.Errorf("a step of a group is written group.CALL.TYPE.NAME, e.g. group.app.exec.backup")
	}
	name, rest = s[:i], s[i:]
	if rest[0] == '[' {
		q, qerr := strconv.QuotedPrefix(rest[1:])
		if qerr != nil || !strings.HasPrefix(rest[1:], `"`) {
			return "", "", "", fmt.Errorf("the key of a group call must be a quoted string, as in group.app[\"jellyfin\"].exec.backup")
		}
		key, _ = strconv.Unquote(q)
		rest = rest[1+len(q):]
		if key == "" || !strings.HasPrefix(rest, "]") {
			return "", "", "", fmt.Errorf("the key of a group call is a quoted, non-empty string in brackets, as in group.app[\"jellyfin\"].exec.backup")
		}
		rest = rest[1:]
		key = norm.NFC.String(key)
	}
	if !strings.HasPrefix(rest, ".") {
		return "", "", "", fmt.Errorf("a step of a group is written group.CALL.TYPE.NAME, e.g. group.app.exec.backup")
	}
	return name, key, rest[1:], nil
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
