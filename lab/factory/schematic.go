package factory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// Schematic is Image Factory's schematic, in its data format: the field
// names and their order decide the canonical YAML, and so the ID. Kept
// apart from the provider's copy on purpose: a test compares the two.
type Schematic struct {
	Overlay       Overlay       `yaml:"overlay,omitempty"`
	Customization Customization `yaml:"customization"`
	// Owner is a field the factory may add to what it stores (Options.Owner):
	// the ID it answers is then not the hash of what was posted.
	Owner string `yaml:"owner,omitempty"`
}

// Customization is a schematic's customization section.
type Customization struct {
	ExtraKernelArgs  []string         `yaml:"extraKernelArgs,omitempty"`
	Meta             []MetaValue      `yaml:"meta,omitempty"`
	SystemExtensions SystemExtensions `yaml:"systemExtensions,omitempty"`
	SecureBoot       SecureBoot       `yaml:"secureboot,omitempty"`
}

// MetaValue is a META partition key and value.
type MetaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

// SystemExtensions names the official extensions.
type SystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// Overlay is an SBC overlay.
type Overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

// SecureBoot are the SecureBoot customizations.
type SecureBoot struct {
	IncludeWellKnownCertificates bool `yaml:"includeWellKnownCertificates,omitempty"`
}

// ParseSchematic decodes a schematic strictly, as the factory does: an
// unknown field is an error (a typo would give another image).
func ParseSchematic(b []byte) (Schematic, error) {
	var s Schematic
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return Schematic{}, err
	}
	return s, nil
}

// Marshal is the canonical YAML: 4-space indentation.
func (s Schematic) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ID is the hex SHA-256 of the canonical YAML.
func (s Schematic) ID() (string, error) {
	b, err := s.Marshal()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
