package incusapi

import (
	"context"
	"net/url"
)

// NetworkLease is one of GET /1.0/networks/{name}/leases: an address the
// managed network's DHCP server (dnsmasq) handed out, or a static or
// gateway entry.
type NetworkLease struct {
	Hostname string `json:"hostname"`
	Hwaddr   string `json:"hwaddr"`
	Address  string `json:"address"`
	Type     string `json:"type"` // "dynamic", "static", "gateway", "uplink"
	Location string `json:"location,omitempty"`
}

// NetworkLeases lists the leases of a managed network. It is how the
// address of a VM without the Incus agent is known: the daemon sees only
// its MAC, the network's DHCP server sees the lease.
func (c *Client) NetworkLeases(ctx context.Context, network string) ([]NetworkLease, error) {
	var list []NetworkLease
	if _, err := c.get(ctx, "/1.0/networks/"+url.PathEscape(network)+"/leases", nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}
