package incusapi

import (
	"context"
	"net/url"
	"path"
	"slices"
	"strings"
)

// StoragePool is GET /1.0/storage-pools/{name} (the part migrate reads).
type StoragePool struct {
	Name   string            `json:"name"`
	Driver string            `json:"driver"` // "zfs", "btrfs", "lvm", "dir", ...
	Status string            `json:"status"`
	Config map[string]string `json:"config,omitempty"`
	UsedBy []string          `json:"used_by,omitempty"`
}

// StoragePool reads a storage pool; IsNotFound when the host has none of
// that name.
func (c *Client) StoragePool(ctx context.Context, name string) (*StoragePool, error) {
	var p StoragePool
	if _, err := c.get(ctx, "/1.0/storage-pools/"+url.PathEscape(name), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// StoragePools lists the names of the host's storage pools, sorted
// (GET /1.0/storage-pools).
func (c *Client) StoragePools(ctx context.Context) ([]string, error) {
	return c.names(ctx, "/1.0/storage-pools", nil)
}

// StoragePoolsAll reads all the host's storage pools, sorted by name
// (GET /1.0/storage-pools?recursion=1).
func (c *Client) StoragePoolsAll(ctx context.Context) ([]StoragePool, error) {
	var list []StoragePool
	if _, err := c.get(ctx, "/1.0/storage-pools", url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b StoragePool) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// StorageVolumes lists the names of a pool's custom volumes, sorted
// (GET /1.0/storage-pools/{pool}/volumes/custom).
func (c *Client) StorageVolumes(ctx context.Context, pool string) ([]string, error) {
	return c.names(ctx, volumesPath(pool), nil)
}

// Network is GET /1.0/networks/{name} (the part migrate reads): a managed
// network, or an interface of the host the daemon reports unmanaged.
type Network struct {
	Name    string            `json:"name"`
	Type    string            `json:"type"` // "bridge", "macvlan", "physical", "loopback", ...
	Managed bool              `json:"managed"`
	Status  string            `json:"status,omitempty"`
	Config  map[string]string `json:"config,omitempty"` // a managed one's: ipv4.address, ipv4.nat, ipv4.dhcp...
	UsedBy  []string          `json:"used_by,omitempty"`
}

// Network reads a network; IsNotFound when the host has none of that name.
func (c *Client) Network(ctx context.Context, name string) (*Network, error) {
	var n Network
	if _, err := c.get(ctx, "/1.0/networks/"+url.PathEscape(name), nil, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// Networks lists the host's networks, managed and not, sorted by name
// (GET /1.0/networks?recursion=1).
func (c *Client) Networks(ctx context.Context) ([]Network, error) {
	var list []Network
	if _, err := c.get(ctx, "/1.0/networks", url.Values{"recursion": {"1"}}, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b Network) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// names lists a collection without recursion: the daemon answers with the
// URLs of its members, whose last element is each one's (escaped) name.
func (c *Client) names(ctx context.Context, p string, q url.Values) ([]string, error) {
	var urls []string
	if _, err := c.get(ctx, p, q, &urls); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(urls))
	for _, u := range urls {
		if i := strings.IndexByte(u, '?'); i >= 0 {
			u = u[:i]
		}
		name, err := url.PathUnescape(path.Base(u))
		if err != nil {
			name = path.Base(u)
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}
