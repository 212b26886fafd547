package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/homelab-migrate/migrate/phases"
)

// protocolVersion changes whenever a message changes shape: 2 is the
// generic codec (codec.go), whose params are the Go fields by name; 3
// adds the stop line (an Apply's Stop closed); 4 renames the fields
// that said Inverse (Revert, of type RevertData) and Record (Facts); 5
// carries an Apply's Intent (the intent line and its answer).
const protocolVersion = 5

// hello is the program's first line.
type hello struct {
	Protocol int    `json:"protocol"`
	Provider string `json:"provider"`
	Schema   string `json:"schema"`
}

// writeHello writes the program's first line.
func writeHello(w io.Writer, name string, schema phases.Schema) error {
	return json.NewEncoder(w).Encode(hello{Protocol: protocolVersion, Provider: name, Schema: SchemaDigest(schema)})
}

// request is a line from the host: a call, the cancellation of one, the
// gentle stop of one (its request's Stop closed), or the answer to a
// call's intent line (Intended: its revert data is saved, unless
// IntentError says why not).
type request struct {
	ID          uint64          `json:"id,omitempty"`
	Method      string          `json:"method,omitempty"`
	Params      json.RawMessage `json:"params,omitempty"`
	Cancel      uint64          `json:"cancel,omitempty"`
	Stop        uint64          `json:"stop,omitempty"`
	Intended    uint64          `json:"intended,omitempty"`
	IntentError string          `json:"intent_error,omitempty"`
}

// reply is a line from the program: output of a call, its result, or its
// intent (an Apply's Intent called: the revert data to save, in Revert).
type reply struct {
	ID     uint64          `json:"id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Log    uint64          `json:"log,omitempty"`
	Data   string          `json:"data,omitempty"`
	Intent uint64          `json:"intent,omitempty"`
	Revert json.RawMessage `json:"revert,omitempty"`
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
// unknown values cross too), the paths marked sensitive, and the secret
// parts of the strings whose provider listed them (phases.SecretParts).
type value struct {
	MsgPack   []byte      `json:"v,omitempty"`
	Sensitive []wirePath  `json:"s,omitempty"`
	Parts     []wireParts `json:"p,omitempty"`
}

// wireParts is a phases.SecretParts mark at a path: its digest is made
// again from the string found there.
type wireParts struct {
	Path  wirePath `json:"at"`
	Parts []string `json:"parts"`
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
		if parts, ok := partsAt(plain, m); ok {
			w.Parts = append(w.Parts, wireParts{Path: p, Parts: parts})
		}
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
	pvm := make([]cty.PathValueMarks, 0, len(w.Sensitive)+len(w.Parts))
	for _, wp := range w.Sensitive {
		p, err := decodePath(wp)
		if err != nil {
			return cty.NilVal, err
		}
		pvm = append(pvm, cty.PathValueMarks{Path: p, Marks: cty.NewValueMarks(phases.SensitiveMark)})
	}
	for _, wp := range w.Parts {
		p, err := decodePath(wp.Path)
		if err != nil {
			return cty.NilVal, err
		}
		if text, ok := stringAt(v, p); ok {
			pvm = append(pvm, cty.PathValueMarks{Path: p, Marks: cty.NewValueMarks(phases.NewSecretParts(text, wp.Parts))})
		}
	}
	return v.MarkWithPaths(pvm), nil
}

// partsAt are the secret parts of the string at m's path, when a
// phases.SecretParts mark made for that very string is among m's marks.
func partsAt(plain cty.Value, m cty.PathValueMarks) ([]string, bool) {
	text, ok := stringAt(plain, m.Path)
	if !ok {
		return nil, false
	}
	for mark := range m.Marks {
		if sp, ok := mark.(phases.SecretParts); ok && sp.Describes(text) {
			return sp.Parts(), true
		}
	}
	return nil, false
}

// stringAt is the known string at p in v.
func stringAt(v cty.Value, p cty.Path) (string, bool) {
	x, err := p.Apply(v)
	if err != nil || x.Type() != cty.String || !x.IsKnown() || x.IsNull() {
		return "", false
	}
	return x.AsString(), true
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
