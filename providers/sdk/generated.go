package sdk

import (
	"encoding/json"
	"fmt"

	"github.com/homelab-migrate/migrate/phases"
)

// A plugin provider's schema is compiled into migrate as generated data:
// the provider derives it from its step types (Provider.Schema), a
// generator writes it with EncodeSchema (go generate), and the light
// schema package (helmschema, talosschema) embeds the file and decodes it
// with DecodeSchema. migrate so knows the schema, rollback sentences
// included, without linking the provider's libraries.

// schemaFile is the generated file: the schema as the plugin handshake
// digests it, plus the rollback sentences, which are prose the digest
// leaves out (phases.StepType.Rollback is not encoded).
type schemaFile struct {
	Schema   phases.Schema     `json:"schema"`
	Rollback map[string]string `json:"rollback,omitempty"`
}

// EncodeSchema encodes a provider's schema as the generated file holds
// it: indented JSON with sorted keys, so that a change reads as a diff.
func EncodeSchema(s phases.Schema) ([]byte, error) {
	f := schemaFile{Schema: s, Rollback: map[string]string{}}
	for name, st := range s.StepTypes {
		if st.Rollback != "" {
			f.Rollback[name] = st.Rollback
		}
	}
	b, err := json.MarshalIndent(f, "", "\t")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeSchema decodes what EncodeSchema wrote; it panics on a file that
// does not decode, which is generated data compiled in (a programming
// error the first test finds).
func DecodeSchema(b []byte) phases.Schema {
	var f schemaFile
	if err := json.Unmarshal(b, &f); err != nil {
		panic(fmt.Sprintf("sdk: a generated schema does not decode: %v", err))
	}
	for name, text := range f.Rollback {
		st, ok := f.Schema.StepTypes[name]
		if !ok {
			panic(fmt.Sprintf("sdk: a generated schema has a rollback sentence for %s, which is no step type of it", name))
		}
		st.Rollback = text
		f.Schema.StepTypes[name] = st
	}
	return f.Schema
}
