// Package inventory reads a live Incus host, read-only, and judges it as
// the source of the move: what `migrate init` reports before it writes a
// runbook.
//
//	h, _ := inventory.Read(ctx, client)   // GETs and HEADs only
//	site, guesses := inventory.Choose(h)  // the runbook's names, from the host
//	findings := append(guesses, inventory.Check(h, site)...)
//
// Read takes what the incus CLI shows of a host: the instances (type,
// state, expanded devices and config, profiles, boot.autostart,
// snapshots and their sizes, whether a running VM's agent answers, and
// which of the move's applications each runs, seen through the files
// API), the storage pools with their space and custom volumes (who uses
// each), the networks (managed or not, NAT, DHCP) and the hardware of
// /1.0/resources (GPUs with their PCI addresses and drivers, disks). It
// never changes anything: only GET and HEAD requests leave it, and a test
// holds it to that by comparing the host before and after.
//
// Choose maps the host onto the runbook's variables (examples/homelab's
// shape): which old VM runs the home services, which Synapse, which k3s;
// the pools, the LAN bridge, the data volume, the iGPU. What it cannot
// see (the router's address reservations, the domain) and what it picked
// among several are findings of kind "guess", so nothing is guessed
// silently.
//
// Check turns what was seen into findings, each with a stable code, what
// was seen and what to do: an old VM with no physical GPU (its video was
// decoded on the CPU), a GPU the Talos VM cannot have, a VM without the
// Incus agent (exec and file steps cannot reach it), boot.autostart on a
// VM the move stops, a pool without room for what the plan makes there,
// no bridge to the LAN, a data volume attached elsewhere.
package inventory
