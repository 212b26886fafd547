package talos

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The factory's schematic as given. Image Factory documents that the
// schematic it stores is authoritative: it may add fields (an owner, for
// example), and the ID it answers is the hash of what it stores, not of
// what was posted. The provider registers its schematic once per run
// (POST /schematics is idempotent) and names the answered ID wherever an
// image is named: the installer of every machine config, the ISO's URL,
// talos_image's outputs (which pin it in the state).

// factorySchematic is the factory's answer for the provider's schematic.
type factorySchematic struct {
	id    string // what the factory answered; the local ID when it did not answer
	local string // computed here: the SHA-256 of the canonical YAML
	body  string // the schematic the factory stores, when its ID differs and it says
	err   error  // why the factory did not answer
}

// differs is true when the factory answered another ID than ours.
func (a factorySchematic) differs() bool { return a.err == nil && a.id != a.local }

// note says where the ID comes from, for plans and logs; "" when the
// factory answered the local computation.
func (a factorySchematic) note(factoryURL string) string {
	switch {
	case a.err != nil:
		return fmt.Sprintf("the Image Factory at %s did not answer (%v): the schematic ID computed locally, %s, is named until it does", factoryURL, a.err, a.local)
	case a.differs():
		s := fmt.Sprintf("the Image Factory at %s answered ID %s for this schematic; computed locally %s (the factory may add fields, e.g. owner): the factory's ID is the one used", factoryURL, a.id, a.local)
		if a.body != "" {
			s += "; the schematic it stores:\n" + indent(a.body)
		}
		return s
	}
	return ""
}

// adopted is the factory's answer for the provider's schematic, asked
// once for the provider's life, so that every step of a run names the
// same ID.
func (s *settings) adopted() factorySchematic {
	s.adoptMu.Lock()
	defer s.adoptMu.Unlock()
	if s.adoption == nil {
		a := s.askFactory()
		s.adoption = &a
	}
	return *s.adoption
}

// askFactory registers the schematic and reads back the one the factory
// stores when its ID is not ours.
func (s *settings) askFactory() factorySchematic {
	a := factorySchematic{id: s.schematicID, local: s.schematicID}
	body, err := s.schematic.canonical()
	if err != nil {
		a.err = err
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := s.factory()
	id, stored, err := f.register(ctx, body)
	if err != nil {
		a.err = err
		return a
	}
	a.id = id
	if id != a.local {
		a.body = stored
		if a.body == "" {
			a.body = f.storedSchematic(ctx, id)
		}
	}
	return a
}

// storedSchematic is GET /schematics/{id}: the schematic as the factory
// stores it; "" when it does not say.
func (f factoryClient) storedSchematic(ctx context.Context, id string) string {
	code, _, b, err := f.call(ctx, http.MethodGet, f.base+"/schematics/"+id, "", nil)
	if err != nil || code != http.StatusOK {
		return ""
	}
	return string(b)
}

// schematicLine is the plan's line on the installer image and its
// schematic, with where the ID comes from when it is not the local one.
func (s *settings) schematicLine(image string) string {
	a := s.adopted()
	line := fmt.Sprintf("installer image: %s (schematic %s, pinned version %s)\n", image, a.id, s.version)
	if n := a.note(s.factoryURL); n != "" {
		line += "schematic: " + n + "\n"
	}
	return line
}
