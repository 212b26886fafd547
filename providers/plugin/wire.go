package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
)

// protocolVersion changes whenever a message changes shape.
const protocolVersion = 1

// hello is the program's first line.
type hello struct {
	Protocol int    `json:"protocol"`
	Provider string `json:"provider"`
	Schema   string `json:"schema"`
}

// request is a line from the host: a call, or the cancellation of one.
type request struct {
	ID     uint64          `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Cancel uint64          `json:"cancel,omitempty"`
}

// reply is a line from the program: output of a call, or its result.
type reply struct {
	ID     uint64          `json:"id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Log    uint64          `json:"log,omitempty"`
	Data   string          `json:"data,omitempty"`
}

// SchemaDigest identifies a schema: host and program must agree on it.
func SchemaDigest(s phases.Schema) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("plugin: a provider schema does not encode: %v", err)) // static data: a programming error
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// value is a cty.Value on the wire: msgpack of the dynamic type (so
// unknown values cross too) and the paths marked sensitive.
type value struct {
	MsgPack   []byte     `json:"v,omitempty"`
	Sensitive []wirePath `json:"s,omitempty"`
}

type wirePath []wireStep

type wireStep struct {
	Attr string `json:"a,omitempty"`
	Key  []byte `json:"k,omitempty"` // msgpack of an index key
}

func encodeValue(v cty.Value) (value, error) {
	if v == cty.NilVal {
		return value{}, nil
	}
	plain, pvm := v.UnmarkDeepWithPaths()
	var w value
	for _, m := range pvm {
		if _, ok := m.Marks[phases.SensitiveMark]; !ok {
			continue
		}
		p, err := encodePath(m.Path)
		if err != nil {
			return value{}, err
		}
		w.Sensitive = append(w.Sensitive, p)
	}
	b, err := ctymsgpack.Marshal(plain, cty.DynamicPseudoType)
	if err != nil {
		return value{}, fmt.Errorf("encoding a value of type %s: %w", plain.Type().FriendlyName(), err)
	}
	w.MsgPack = b
	return w, nil
}

func decodeValue(w value) (cty.Value, error) {
	if w.MsgPack == nil {
		return cty.NilVal, nil
	}
	v, err := ctymsgpack.Unmarshal(w.MsgPack, cty.DynamicPseudoType)
	if err != nil {
		return cty.NilVal, fmt.Errorf("decoding a value: %w", err)
	}
	if len(w.Sensitive) == 0 {
		return v, nil
	}
	pvm := make([]cty.PathValueMarks, 0, len(w.Sensitive))
	for _, wp := range w.Sensitive {
		p, err := decodePath(wp)
		if err != nil {
			return cty.NilVal, err
		}
		pvm = append(pvm, cty.PathValueMarks{Path: p, Marks: cty.NewValueMarks(phases.SensitiveMark)})
	}
	return v.MarkWithPaths(pvm), nil
}

func encodePath(p cty.Path) (wirePath, error) {
	out := make(wirePath, 0, len(p))
	for _, s := range p {
		switch s := s.(type) {
		case cty.GetAttrStep:
			out = append(out, wireStep{Attr: s.Name})
		case cty.IndexStep:
			b, err := ctymsgpack.Marshal(s.Key, cty.DynamicPseudoType)
			if err != nil {
				return nil, fmt.Errorf("encoding a path: %w", err)
			}
			out = append(out, wireStep{Key: b})
		default:
			return nil, fmt.Errorf("encoding a path: unknown step %T", s)
		}
	}
	return out, nil
}

func decodePath(wp wirePath) (cty.Path, error) {
	out := make(cty.Path, 0, len(wp))
	for _, s := range wp {
		if s.Key == nil {
			out = append(out, cty.GetAttrStep{Name: s.Attr})
			continue
		}
		k, err := ctymsgpack.Unmarshal(s.Key, cty.DynamicPseudoType)
		if err != nil {
			return nil, fmt.Errorf("decoding a path: %w", err)
		}
		out = append(out, cty.IndexStep{Key: k})
	}
	return out, nil
}

// The wire forms of the requests and responses: the same fields, with
// cty values as value. Writers (Log) and callbacks (Approval.Prompt) do
// not cross: output comes back as log lines, and no plugin step asks a
// person.

type wPrior struct {
	Outputs value              `json:"outputs"`
	Private json.RawMessage    `json:"private,omitempty"`
	Inverse *providers.Inverse `json:"inverse,omitempty"`
}

type wConfigure struct {
	Name   string `json:"name"`
	Config value  `json:"config"`
	Dir    string `json:"dir"`
}

type wDiags struct {
	Diagnostics phases.Diagnostics `json:"diagnostics,omitempty"`
}

type wRead struct {
	Type   string         `json:"type"`
	Addr   phases.Address `json:"addr"`
	Config value          `json:"config"`
	Prior  *wPrior        `json:"prior,omitempty"`
}

type wReadResponse struct {
	Observation providers.Observation `json:"observation"`
	Detail      string                `json:"detail,omitempty"`
	Outputs     value                 `json:"outputs"`
	Inverse     *providers.Inverse    `json:"inverse,omitempty"`
	Diagnostics phases.Diagnostics    `json:"diagnostics,omitempty"`
}

type wPlan struct {
	Type   string           `json:"type"`
	Addr   phases.Address   `json:"addr"`
	Config value            `json:"config"`
	Prior  *wPrior          `json:"prior,omitempty"`
	Action providers.Action `json:"action"`
}

type wPlanResponse struct {
	Diff         string             `json:"diff,omitempty"`
	Irreversible string             `json:"irreversible,omitempty"`
	Private      json.RawMessage    `json:"private,omitempty"`
	Diagnostics  phases.Diagnostics `json:"diagnostics,omitempty"`
}

type wApply struct {
	Type       string          `json:"type"`
	Addr       phases.Address  `json:"addr"`
	Config     value           `json:"config"`
	Prior      *wPrior         `json:"prior,omitempty"`
	Planned    json.RawMessage `json:"planned,omitempty"`
	ApprovedBy string          `json:"approved_by,omitempty"`
}

type wApplyResponse struct {
	Outputs     value              `json:"outputs"`
	Private     json.RawMessage    `json:"private,omitempty"`
	Inverse     *providers.Inverse `json:"inverse,omitempty"`
	Record      map[string]string  `json:"record,omitempty"`
	Diagnostics phases.Diagnostics `json:"diagnostics,omitempty"`
}

type wRevert struct {
	Type    string            `json:"type"`
	Addr    phases.Address    `json:"addr"`
	Config  value             `json:"config"`
	Inverse providers.Inverse `json:"inverse"`
	Outputs value             `json:"outputs"`
	Resumed bool              `json:"resumed,omitempty"`
}

type wDigest struct {
	Type   string         `json:"type"`
	Addr   phases.Address `json:"addr"`
	Config value          `json:"config"`
}

type wDigestResponse struct {
	Digest      string             `json:"digest,omitempty"`
	Unknown     bool               `json:"unknown,omitempty"`
	Diagnostics phases.Diagnostics `json:"diagnostics,omitempty"`
}

func encodePrior(p *providers.Prior) (*wPrior, error) {
	if p == nil {
		return nil, nil
	}
	o, err := encodeValue(p.Outputs)
	if err != nil {
		return nil, err
	}
	return &wPrior{Outputs: o, Private: p.Private, Inverse: p.Inverse}, nil
}

func decodePrior(w *wPrior) (*providers.Prior, error) {
	if w == nil {
		return nil, nil
	}
	o, err := decodeValue(w.Outputs)
	if err != nil {
		return nil, err
	}
	return &providers.Prior{Outputs: o, Private: w.Private, Inverse: w.Inverse}, nil
}
