// Package home is the lab home server of `migrate-lab serve` (the program
// cmd/migrate-lab) and its demo:
// the lab's Incus host (lab/incushost) holding the brief's three old VMs,
// whose VMs booted from the Talos ISO become lab Talos nodes
// (lab/talosvm, with a real Kubernetes after the bootstrap), the host's
// data directory, the Talos ISO, and the Matrix federation endpoint the
// example's http_check asks.
//
//	h, _ := home.Start(ctx, home.Options{Dir: dir, Log: os.Stderr})
//	defer h.Close()
//	env := h.Env() // INCUS_DIR, MIGRATE_VAR_zfs_data, ... for examples/homelab
//
// Layout of Dir: incus/ (the Incus host; incus/unix.socket is its socket,
// what INCUS_DIR points the incus provider at), data/ (the host's data,
// the example's zfs_data, shared into the VMs), images/ (the Talos ISO: an
// empty placeholder, the lab boots no real image), lab.env (Env, for
// `migrate-lab env`: lab/labenv; removed by Close) and events.jsonl
// (EventsFile: the effects the lab made, one JSON line each, appended:
// every command started in an instance, every etcd bootstrap of a Talos
// VM, every Job pod its Kubernetes ran; ReadEvents reads it, and a test
// counts once-only effects from it). Each Talos VM's node
// and Kubernetes live in its instance's directory
// (incus/instances/NAME/guest/): deleting the instance deletes them, and
// a new VM of the same name boots from an empty disk.
//
// Addresses: the Incus host gives every instance a 127.0.1.N address at
// its creation, in creation order; a Talos VM listens on it (machine API
// :50000, Kubernetes :6443), and the example reaches it through its
// instance's ipv4 attribute, so no variable names it. Two labs on one
// machine give the same addresses, unless one takes another
// Options.AddressBlock (127.B.1.N).
//
// The federation endpoint answers GET /_matrix/federation/v1/version with
// 200 and Synapse's body, or 503 after FailFederation(true): the demo's
// injected failure.
package home
