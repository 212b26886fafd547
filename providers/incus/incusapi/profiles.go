package incusapi

import (
	"context"
	"net/url"
)

// Profile is GET /1.0/profiles/{name} (the part migrate reads).
type Profile struct {
	Name        string                       `json:"name"`
	Description string                       `json:"description"`
	Config      map[string]string            `json:"config"`
	Devices     map[string]map[string]string `json:"devices"`
}

// Profile reads a profile; IsNotFound when the project has none of that
// name.
func (c *Client) Profile(ctx context.Context, name string) (*Profile, error) {
	var p Profile
	if _, err := c.get(ctx, "/1.0/profiles/"+url.PathEscape(name), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// RootPool is the pool of the profile's root disk (a disk device at
// path "/"), "" when it has none: where Incus puts an instance's root, and
// the pool a custom volume goes to when none is named.
func (p *Profile) RootPool() string {
	for _, d := range p.Devices {
		if d["type"] == "disk" && d["path"] == "/" && d["pool"] != "" {
			return d["pool"]
		}
	}
	return ""
}
