package talos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// FactoryHost is the Image Factory serving installer images.
const FactoryHost = "factory.talos.dev"

// schematic is an Image Factory schematic: the image customization whose
// canonical YAML hashes to the schematic ID. The fields and their order
// are Image Factory's data format; image-factory itself is not imported
// (it pulls machinery to a v1.14 alpha).
type schematic struct {
	Overlay       overlay       `yaml:"overlay,omitempty"`
	Customization customization `yaml:"customization"`
}

type customization struct {
	ExtraKernelArgs  []string         `yaml:"extraKernelArgs,omitempty"`
	Meta             []metaValue      `yaml:"meta,omitempty"`
	SystemExtensions systemExtensions `yaml:"systemExtensions,omitempty"`
	SecureBoot       secureBoot       `yaml:"secureboot,omitempty"`
}

type metaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

type systemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

type overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

type secureBoot struct {
	IncludeWellKnownCertificates bool `yaml:"includeWellKnownCertificates,omitempty"`
}

// parseSchematic reads a schematic, refusing unknown fields (a typo would
// silently give another image).
func parseSchematic(b []byte) (schematic, error) {
	var s schematic
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return schematic{}, err
	}
	return s, nil
}

// canonical is the schematic's YAML with 4-space indentation, the form
// whose SHA-256 is its ID.
func (s schematic) canonical() ([]byte, error) {
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

// ID is the schematic ID: the hex SHA-256 of the canonical YAML.
func (s schematic) ID() (string, error) {
	b, err := s.canonical()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// SchematicID computes the Image Factory schematic ID of a schematic given
// as YAML (empty: no customization).
func SchematicID(schematicYAML string) (string, error) {
	s, err := parseSchematic([]byte(schematicYAML))
	if err != nil && strings.TrimSpace(schematicYAML) != "" {
		return "", err
	}
	return s.ID()
}

// ExtensionsSchematicID is the ID of the schematic of official extensions.
func ExtensionsSchematicID(extensions ...string) string {
	var s schematic
	s.Customization.SystemExtensions.OfficialExtensions = extensions
	id, _ := s.ID()
	return id
}

// installerImage is the metal installer of a schematic at a Talos version
// on the registry of the Image Factory at host (the factory serves its
// installers under its own host name): always the version asked for,
// never the client library's own.
func installerImage(host, schematicID, version string) string {
	return host + "/metal-installer/" + schematicID + ":v" + strings.TrimPrefix(version, "v")
}

// InstallerImage is installerImage of the public factory, for callers
// outside the package.
func InstallerImage(schematicID, version string) string {
	return installerImage(FactoryHost, schematicID, version)
}
