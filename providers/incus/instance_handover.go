package incus

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// A later step of the runbook may change a device an incus_instance step
// declared, on purpose: incus_device detaches the install ISO once the
// node is installed. That is not drift. After such a step runs, the
// engine reads the instance again (Rebase) and the device as it is now
// is handed over: the plan compares the instance with it instead of the
// declaration, for as long as the declaration stays what it was. A
// change of the declaration in the runbook is planned as usual.

// handedDevice is a declared device as a later step left it.
type handedDevice struct {
	// Declared is a digest of the declaration it replaces.
	Declared string `json:"declared"`
	// Now is the device as found; nil: removed.
	Now map[string]string `json:"now,omitempty"`
}

// deviceDigest is a digest of a device's options, in key order.
func deviceDigest(d map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(d)) {
		h.Write([]byte(k + "\x00" + d[k] + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// withHandedOver is s with its devices as later steps left them, where
// their declaration has not changed since; the handed-over entries still
// valid are returned to be kept.
func withHandedOver(s DesiredInstance, pv instancePrivate) (DesiredInstance, map[string]handedDevice) {
	if len(pv.HandedOver) == 0 {
		return s, nil
	}
	kept := map[string]handedDevice{}
	devs := maps.Clone(s.Devices)
	for name, h := range pv.HandedOver {
		declared, ok := s.Devices[name]
		if !ok || deviceDigest(declared) != h.Declared {
			continue // the runbook changed it: plan it as declared
		}
		kept[name] = h
		if h.Now == nil {
			delete(devs, name)
		} else {
			devs[name] = h.Now
		}
	}
	s.Devices = devs
	return s, kept
}

// readHandOver is the Rebase read: the declared devices that differ on
// the instance now are handed over (sensitive ones are not: their
// options would be kept in the state).
func readHandOver(s DesiredInstance, inst *incusapi.Instance, pv instancePrivate) sdk.Read[instanceRevert] {
	if inst == nil {
		return sdk.Read[instanceRevert]{Observation: providers.Absent}
	}
	handed := map[string]handedDevice{}
	for name, declared := range s.Devices {
		live, ok := inst.Devices[name]
		if s.SensitiveDevices[name] || ok && maps.Equal(live, declared) {
			continue
		}
		h := handedDevice{Declared: deviceDigest(declared)}
		if ok {
			h.Now = live
		}
		handed[name] = h
	}
	if len(handed) == 0 {
		handed = nil
	}
	pv.HandedOver = handed
	pv.HandedConfig = handedConfigOf(s, inst)
	pv.ETag, pv.Planned = "", false
	return sdk.Read[instanceRevert]{Observation: providers.Present, Private: pv}
}

// handedKey is a declared config key a later step removed.
type handedKey struct {
	// Declared is a digest of the key and the value it declared.
	Declared string `json:"declared"`
}

// keyDigest is a digest of a config key's declared value (for a
// sensitive one, a machine config with private keys: nothing guessable).
func keyDigest(k, v string) string {
	return deviceDigest(map[string]string{k: v})
}

// withHandedConfig is s without the config keys later steps removed,
// where their declaration has not changed since; the entries still
// valid are returned to be kept.
func withHandedConfig(s DesiredInstance, pv instancePrivate) (DesiredInstance, map[string]handedKey) {
	if len(pv.HandedConfig) == 0 {
		return s, nil
	}
	kept := map[string]handedKey{}
	cfg := maps.Clone(s.Config)
	for k, h := range pv.HandedConfig {
		v, ok := s.Config[k]
		if !ok || keyDigest(k, v) != h.Declared {
			continue // the runbook changed it: plan it as declared
		}
		kept[k] = h
		delete(cfg, k)
	}
	s.Config = cfg
	return s, kept
}

// handedConfigOf lists the declared config keys the instance no longer
// has: a later step removed them.
func handedConfigOf(s DesiredInstance, inst *incusapi.Instance) map[string]handedKey {
	var out map[string]handedKey
	for k, v := range s.Config {
		if _, ok := inst.Config[k]; ok {
			continue
		}
		if out == nil {
			out = map[string]handedKey{}
		}
		out[k] = handedKey{Declared: keyDigest(k, v)}
	}
	return out
}

// handedNote says, in a plan, which devices and config keys later steps
// changed.
func handedNote(kept map[string]handedDevice, keys map[string]handedKey) string {
	if len(kept) == 0 && len(keys) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		parts = append(parts, "config "+k+" removed")
	}
	for _, name := range slices.Sorted(maps.Keys(kept)) {
		if kept[name].Now == nil {
			parts = append(parts, "device "+name+" removed")
		} else {
			parts = append(parts, "device "+name+" changed")
		}
	}
	return "\n  (as a later step left it, not drift: " + strings.Join(parts, ", ") + ")"
}
