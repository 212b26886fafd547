package incus

import (
	"context"

	"github.com/homelab-migrate/migrate/phases"
)

// A volume (or a disk device) that names no pool goes where Incus puts
// an instance's root: the pool of the default profile's root disk
// ("default" on a plain install, "local" on IncusOS). Asked of the daemon,
// not assumed.

// defaultPool is the pool of the default profile's root disk, or a
// diagnostic saying to set pool when that profile has none.
func defaultPool(ctx context.Context, c *call, attr string) (string, phases.Diagnostics) {
	p, err := c.Settings.c.Profile(ctx, "default")
	if err != nil {
		return "", apiErr(c, "Cannot Read Default Profile", err)
	}
	if pool := p.RootPool(); pool != "" {
		return pool, nil
	}
	l := &hostLists{c: c}
	has, _ := l.has(ctx, hostRef{kind: "pool"})
	return "", errorf("No Default Storage Pool", "%s sets no %s, and the default profile of Incus at %s has no root disk to take the pool from (as Incus would); %s. Set %s.", c.Addr, attr, c.Settings.where, has, attr)
}

// choosePool fills in the volume's pool when the step names none; the
// plan says so (chosenNote).
func choosePool(ctx context.Context, c *call, s *volumeSpec) phases.Diagnostics {
	if s.Pool != "" {
		return nil
	}
	pool, d := defaultPool(ctx, c, "pool")
	s.Pool, s.poolChosen = pool, pool != ""
	return d
}

// chosenNote is what a plan adds when it chose the pool.
func chosenNote(s volumeSpec) string {
	if !s.poolChosen {
		return ""
	}
	return " (the default profile's root disk pool; set pool to choose another)"
}
