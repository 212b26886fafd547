package factory

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ISOMagic starts the lab's ISO: the first line of its header.
const ISOMagic = "TALOS-LAB-ISO/1"

// ISOSize is the size of every lab ISO: small, but not a placeholder.
const ISOSize = 1 << 20

// ISO is what a lab ISO boots.
type ISO struct {
	Version string // the Talos version, "v1.13.3"
	Arch    string // amd64 or arm64
	// Platform is "metal" (the maintenance API waits for the first
	// config) or "nocloud" (the config is read from a cidata drive first).
	Platform    string
	SchematicID string
	Schematic   Schematic
}

// Extensions are the official extensions the ISO's schematic carries.
func (i ISO) Extensions() []string {
	return i.Schematic.Customization.SystemExtensions.OfficialExtensions
}

// ErrNoBootableMedium: the file holds no lab Talos image (an empty
// placeholder, another file), so a VM booting it finds nothing to boot.
var ErrNoBootableMedium = errors.New("no bootable medium")

// EncodeISO is the ISO of a schematic at a version: the header, the
// schematic's canonical YAML, then padding to ISOSize derived from them
// (so the whole file's SHA-256 differs with either).
func EncodeISO(version, arch string, s Schematic) ([]byte, error) {
	return EncodePlatformISO("metal", version, arch, s)
}

// EncodePlatformISO is the ISO of a platform (metal or nocloud); a metal
// ISO's header has no platform line, so its bytes are those of before.
func EncodePlatformISO(platform, version, arch string, s Schematic) ([]byte, error) {
	id, err := s.ID()
	if err != nil {
		return nil, err
	}
	y, err := s.Marshal()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\ntalos-version: %s\narch: %s\n", ISOMagic, version, arch)
	if platform != "metal" {
		fmt.Fprintf(&b, "platform: %s\n", platform)
	}
	fmt.Fprintf(&b, "schematic-id: %s\nschematic-length: %d\n\n", id, len(y))
	b.Write(y)
	if b.Len() > ISOSize {
		return nil, fmt.Errorf("schematic too large for the lab's ISO (%d bytes)", b.Len())
	}
	seed := sha256.Sum256(b.Bytes())
	for b.Len() < ISOSize {
		seed = sha256.Sum256(seed[:])
		b.Write(seed[:min(len(seed), ISOSize-b.Len())])
	}
	return b.Bytes(), nil
}

// ReadISO reads the header of a lab ISO; a file without one is
// ErrNoBootableMedium.
func ReadISO(path string) (ISO, error) {
	f, err := os.Open(path)
	if err != nil {
		return ISO{}, err
	}
	defer f.Close()
	return parseISO(io.LimitReader(f, 64<<10))
}

func parseISO(r io.Reader) (ISO, error) {
	br := bufio.NewReader(r)
	line := func() string {
		l, _ := br.ReadString('\n')
		return strings.TrimSuffix(l, "\n")
	}
	if line() != ISOMagic {
		return ISO{}, ErrNoBootableMedium
	}
	fields := map[string]string{}
	for {
		l := line()
		if l == "" {
			break
		}
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			return ISO{}, fmt.Errorf("%w: bad header line %q", ErrNoBootableMedium, l)
		}
		fields[k] = v
	}
	n, err := strconv.Atoi(fields["schematic-length"])
	if err != nil || n < 0 || n > ISOSize {
		return ISO{}, fmt.Errorf("%w: bad schematic-length", ErrNoBootableMedium)
	}
	y := make([]byte, n)
	if _, err := io.ReadFull(br, y); err != nil {
		return ISO{}, fmt.Errorf("%w: truncated schematic", ErrNoBootableMedium)
	}
	s, err := ParseSchematic(y)
	if err != nil {
		return ISO{}, fmt.Errorf("%w: its schematic: %v", ErrNoBootableMedium, err)
	}
	iso := ISO{Version: fields["talos-version"], Arch: fields["arch"], Platform: fields["platform"], SchematicID: fields["schematic-id"], Schematic: s}
	if iso.Platform == "" {
		iso.Platform = "metal"
	}
	if id, _ := s.ID(); id != iso.SchematicID || iso.Version == "" {
		return ISO{}, fmt.Errorf("%w: its header does not match its schematic", ErrNoBootableMedium)
	}
	return iso, nil
}
