// Package home is the lab home server of `migrate-lab serve` (the program
// cmd/migrate-lab) and its demo:
// the lab's Incus host (lab/incushost) holding the brief's three old VMs,
// whose VMs booted from the Talos ISO become lab Talos nodes
// (lab/talosvm, with a real Kubernetes after the bootstrap), the host's
// data directory, the Image Factory the talos provider fetches the ISO
// from (lab/factory, on 127.0.0.1; it knows the brief's i915 schematic
// already, as the public factory does, and adds an owner, FactoryOwner,
// to what it stores, so that its IDs are not the plain computation), and
// the homeserver endpoint the example's http_checks ask: the router's
// forward to the node's ingress.
//
//	h, _ := home.Start(ctx, home.Options{Dir: dir, Log: os.Stderr})
//	defer h.Close()
//	env := h.Env() // INCUS_CONF, MIGRATE_VAR_incus_remote, MIGRATE_VAR_image_factory, ... for examples/homelab
//
// The host is an IncusOS host as the brief's: reached over HTTPS only (no
// unix socket), with a client certificate it trusts; its pools are
// IncusOS's own "local" (StoragePool) and "tank" (DataPool, the data
// disks) holding the custom filesystem volume "data" (DataVolume: the
// photos, files and recordings, shared into the node); its networks the
// NAT bridge incusbr0 (the old VMs) and its own bridge to the LAN,
// enp5s0 (LANBridge), whose DHCP server is the home router (router.go);
// its hardware the brief's machine (Hardware: 8 threads, 32GiB, the Intel
// iGPU at 0000:00:02.0 with i915, an NVMe disk, the mirror's two disks),
// as /1.0/resources reports it to migrate init.
//
// Layout of Dir: incus/ (the Incus host; incus/server.crt its
// certificate), incus-client/ (an INCUS_CONF directory whose default
// remote "lab" is the host, with a trusted client certificate: what the
// incus CLI and the incus provider use), matrix-ca.pem (MatrixCA),
// matrix-tls.crt and matrix-tls.key (the endpoint's certificate, the
// example's synapse-tls Secret: MatrixTLSCert, MatrixTLSKey),
// images/ (where the example's
// talos_image downloads the ISO: MIGRATE_VAR_talos_iso_dir; WriteISO
// writes one as a user who fetched it by hand has it), lab.env (Env, for
// `migrate-lab env`: lab/labenv; removed by Close; 0600, since it holds
// the old Samba account's password of samba_check_password),
// samba-passwords.json (the Debian old Samba's accounts' passwords,
// 0600: sambausers.go) and events.jsonl
// (EventsFile: the effects the lab made, one JSON line each, appended:
// every command started in an instance, every etcd bootstrap of a Talos
// VM, every Job pod its Kubernetes ran; ReadEvents reads it, and a test
// counts once-only effects from it). Each Talos VM's node
// and Kubernetes live in its instance's directory
// (incus/instances/NAME/guest/): deleting the instance deletes them, and
// a new VM of the same name boots from an empty disk.
//
// Addresses: the Incus host gives every instance a 127.B.1.N address on
// incusbr0 (B: Options.AddressBlock). A VM bridged onto the LAN gets its
// address from the router instead, which Incus does not see: by
// reservation for a MAC it was told of (NodeMAC gets NodeAddress,
// 127.B.200.50, RehearsalMAC 127.B.200.51, the example's defaults), from
// 127.B.200.100 on for the others; Reserve changes a reservation as a user
// does in the router's page. A Talos VM listens on its address (machine
// API :50000, Kubernetes :6443). Two labs on one machine take different
// blocks, or their addresses meet.
//
// A VM boots the ISO attached to it (lab/talosvm): the node runs its
// Talos version and schematic. An ISO that holds no Talos image (an empty
// file) does not boot: the VM runs, nothing answers at its address, and
// the lab's log has its console's "BdsDxe: No bootable option or device
// was found", as OVMF says on a real host.
//
// The homeserver endpoint (MatrixURL, the example's matrix_url) is the
// home's public address as the internet reaches it: HTTPS only, with a
// certificate for MatrixDomain and its address from a CA of its own
// (MatrixCA, Dir/matrix-ca.pem, the example's matrix_ca; a new one each
// start), so a client that does not name that CA refuses it as one
// refuses an untrusted ingress. Behind it is the router's port forward
// of 443 to the Talos node's ingress, NodeAddress:IngressHTTPSPort (30443,
// what approval.dns asks the user to set; portforward.go): each request
// goes there for MatrixDomain (SNI and Host), the ingress's certificate
// verified against MatrixCA, so what answers is the cluster: the
// ingress-nginx stand-in routes the Ingress to the Synapse pod (lab/apps,
// lab/kubecp), which serves /_matrix/client/versions (ClientVersionsPath,
// the example's health check of Synapse), /_matrix/federation/v1/version
// (FederationPath) and /.well-known/matrix/server (WellKnownPath, its
// serve_server_wellknown delegation, MatrixDelegation). Until the
// ingress answers there (before ingress-matrix, after its rollback), the
// endpoint answers 502 naming the forward's target. FailFederation(true)
// makes the federation API answer 503: the demo's injected failure.
//
// What differs from a router and a real Synapse: a router forwards TCP
// and the client's own TLS reaches the ingress; the lab has no public
// DNS (matrix_url is an address, not the homeserver's name), so the
// endpoint ends the client's TLS with the same certificate the ingress
// serves (MatrixTLSCert, the example's synapse-tls Secret) and asks the
// ingress again by name; a forward that goes nowhere gives 502, not a
// refused connection. The forward points at the node from the lab's
// start (the lab has no router page for forwards): before the move the
// old matrix VM is not reached through matrix_url, and a rollback's
// "point the forward back" (approval.dns's revert message) is not
// played; the old Synapse is checked inside its VM instead.
package home
