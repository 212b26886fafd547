package engine

import (
	"encoding/json"
	"fmt"

	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/homelab-migrate/migrate/phases"
)

// redact replaces every value marked sensitive by a stand-in of its type:
// the string phases.Redacted for strings, null otherwise.
func redact(v cty.Value) (cty.Value, bool) {
	found := false
	out, _ := cty.Transform(v, func(_ cty.Path, x cty.Value) (cty.Value, error) {
		if !x.HasMark(phases.SensitiveMark) {
			return x, nil
		}
		found = true
		plain, _ := x.UnmarkDeep()
		if plain.Type() == cty.String {
			return cty.StringVal(phases.Redacted), nil
		}
		return cty.NullVal(plain.Type()), nil
	})
	out, _ = out.UnmarkDeep()
	return out, found
}

type storedValue struct {
	Value json.RawMessage `json:"value"`
	Type  json.RawMessage `json:"type"`
	// Redacted says some values were sensitive and are not stored; a
	// later step that needs them gets them again from the provider's Read.
	Redacted bool `json:"redacted,omitempty"`
}

// encodeOutputs turns outputs into their state form, redacted.
func encodeOutputs(v cty.Value) (json.RawMessage, error) {
	if v == cty.NilVal || v.IsNull() {
		return nil, nil
	}
	r, redacted := redact(v)
	if !r.IsWhollyKnown() {
		return nil, fmt.Errorf("provider returned unknown outputs")
	}
	val, err := ctyjson.Marshal(r, r.Type())
	if err != nil {
		return nil, err
	}
	ty, err := ctyjson.MarshalType(r.Type())
	if err != nil {
		return nil, err
	}
	return json.Marshal(storedValue{Value: val, Type: ty, Redacted: redacted})
}

// decodeOutputs is the revert data of encodeOutputs; redacted reports whether
// sensitive values are missing from it.
func decodeOutputs(raw json.RawMessage) (v cty.Value, redacted bool, err error) {
	if len(raw) == 0 {
		return cty.EmptyObjectVal, false, nil
	}
	var sv storedValue
	if err := json.Unmarshal(raw, &sv); err != nil {
		return cty.NilVal, false, err
	}
	ty, err := ctyjson.UnmarshalType(sv.Type)
	if err != nil {
		return cty.NilVal, false, fmt.Errorf("type: %w", err)
	}
	v, err = ctyjson.Unmarshal(sv.Value, ty)
	if err != nil {
		return cty.NilVal, false, fmt.Errorf("value: %w", err)
	}
	return v, sv.Redacted, nil
}
