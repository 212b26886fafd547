// Package talos is the provider for Talos Linux nodes. Talos has no SSH and
// no shell: everything goes through its machine API (gRPC with mutual TLS,
// what talosctl speaks), and a node's whole configuration is one machine
// config rendered from a secrets bundle plus patches kept in git.
//
// Step types:
//
//   - talos_machine_config: renders the config (base from the secrets bundle
//     with machinery's generate package, the installer image of the PINNED
//     Talos version and the Image Factory schematic, the version contract
//     of the pinned version, then the patches), validates it as a metal node
//     would before anything is sent, and applies it with the safe ladder:
//     a dry run whose diff is the plan, TRY with a timeout, the step's
//     verify checks while the TRY is pending, then the permanent apply
//     (NO_REBOOT by default). A failed check leaves the TRY to revert by
//     itself. The revert data is the previous config, age-encrypted. The
//     rendered attribute's file is written by Apply only (a plan has no
//     side effects), secrets redacted unless rendered_secrets = "include".
//     A node in maintenance mode (booted from the ISO: self-signed TLS, no
//     client auth, Version Unimplemented) is found when the mTLS version
//     check fails; its plan is "install: first config", checked against
//     the disks it reports (the install disk, each UserVolumeConfig CEL
//     selector matching exactly one disk, with machinery's DiskLocator
//     environment), and the config is sent over the insecure API only to
//     an address the runbook names (maintenance.go, disks.go). The install
//     disk is install_disk_selector, CEL in the same environment
//     (installdisk.go): carried as is by 1.14's UnattendedInstallConfig,
//     written as 1.13's machine.install.diskSelector when its terms are
//     ones that selector makes (and the plan checks machinery's reading of
//     it, DiskMatchExpression, picks the same disk); the plan names the
//     disk picked by size, transport, model and serial, never by device. With mac
//     (the VM's NIC; one node per step), the node at the address must
//     have a link of that MAC, read as talosctl get links --insecure
//     does (network.LinkStatus over the insecure connection): the plan
//     says "node ADDR is MAC, the VM's NIC", another MAC fails the plan
//     ("Another Machine At The Address": the MACs found, the one
//     expected, the router's DHCP reservation to check), and the apply
//     checks again on the connection it sends on, sending nothing to
//     another machine; an address where nothing answers names the MAC
//     and its reservation (mac.go, reach.go). Without mac the plan notes
//     once that the node's identity was not checked. An installed node
//     is not checked (its certificates are its identity). The MAC is what
//     the answering machine reports itself, so it is no authentication,
//     and every such plan says so. With first_install = "nocloud"
//     (nocloud.go) nothing is sent to the node: the config is the
//     user_data output (sensitive, known after apply), which the VM's
//     incus_instance step puts in its cloud-init.user-data with a disk of
//     source cloud-init:config, so that it travels over the Incus host's
//     authenticated API and the node (a nocloud image) installs from its
//     config drive; a machine in maintenance mode at the address is then
//     refused. user_data lists the secrets inside it (the values the
//     machinery's RedactSecrets and the provider's scrubber replace, each
//     key's PEM lines: userDataParts), so that migrate's scrubbers learn
//     those and the config whole, not each of its words (secret/doc.go). A node the state records as installed that answers in
//     maintenance mode is refused at read, plan and apply, whatever
//     first_install says (a wiped node, or an impostor). The install
//     has no revert data.
//   - talos_image (image.go): the ISO from the Image Factory at the
//     provider's image_factory (default https://factory.talos.dev). It
//     checks GET /versions offers the pin, registers the schematic's
//     canonical YAML with POST /schematics and takes the answered ID as
//     authoritative (adopt.go: the factory may add fields, such as an
//     owner; the plan and log then show both IDs and the schematic it
//     stores, from the answer or GET /schematics/ID; image-factory is not
//     imported), checks the installer's manifest (HEAD
//     /v2/metal-installer/<id>/manifests/<version>), then downloads
//     /image/<id>/<version>/metal-<arch>.iso through a temporary file
//     beside path (default the user cache directory), logging progress
//     every quarter and its SHA-256. A file holding the recorded
//     checksum is not fetched again (Read: present; changed: drifted).
//     Rollback keeps the file. Its schematic_id output pins the factory's
//     ID in the state: a later answer of another ID is drift. The
//     installer image of every step (machine configs, upgrades) is on
//     image_factory's host, by the ID the factory answered (asked once
//     per provider; the local computation when it does not answer, which
//     the plan says).
//   - talos_bootstrap, talos_kubeconfig, talos_read, talos_service_health.
//   - talos_upgrade (upgrade.go, upgradeapi.go), the one explicit way to
//     change the Talos version. The node's Version chooses the path, as
//     talosctl upgrade does: Talos 1.13 and later pull the installer
//     (ImageService.Pull into the system containerd, progress logged),
//     run it with LifecycleService.Upgrade (its lines logged, a non-zero
//     exit code refused) and reboot; an older node takes the legacy
//     MachineService.Upgrade. The reboot is seen by the boot ID
//     (/proc/sys/kernel/random/boot_id) changing, then the upgrade is
//     verified: the Version, and the ExtensionStatus resources (the
//     "schematic" extension's version is the schematic ID; "modules.dep",
//     which the installer adds for extensions' kernel modules, is no
//     schematic's) must be the pinned version, the schematic ID the factory answered
//     and its official extensions. A node that booted its other A/B partition runs the old
//     image and answers healthy: the step fails ("Upgrade Did Not Take")
//     naming what it runs. The revert data is what the node ran before
//     (version, schematic, extensions and the installer that puts it
//     back); rollback installs that and verifies it the same way.
//
// Releases (release.go): configs are rendered with the version contract
// of the pinned release, up to the linked machinery's own (its tag). A
// patch key the release keeps in a typed document fails the plan with the
// patch rewritten for it as a diff (patchrelease.go, package talospatch;
// migrate patches upgrade writes it through the talos program's
// upgrade-patch). On a node whose running config predates the release's
// new defaults (workload isolation, /var nosuid,nodev), the plan warns
// with the patch that keeps them off (defaults.go).
//
// etcd snapshots (etcdsnapshot.go): before talos_machine_config changes
// an installed control-plane node (any mode, a reboot included) and before
// talos_upgrade upgrades one, when its etcd runs, the provider takes a
// snapshot through MachineService.EtcdSnapshot, checks etcd's format (512-byte
// pages, then their SHA-256) as talosctl does, and streams it
// age-encrypted (to the identity's recipient and the runbook's
// .age-recipients) into etcd-snapshots/ of the state's directory
// (ConfigureRequest.StateDir; the runbook's .migrate/ without one): the
// clear snapshot never touches the disk. Its file, SHA-256, size, time and
// step are in the step's revert data. The plan says one will be taken. A
// snapshot that fails stops the change before anything is sent. Without an
// age identity none is kept (the plan and the log say why). When a node
// that answers reports etcd not running, a step that kept a snapshot of it
// reads as drifted naming the snapshot (the line of the rollback's plan),
// its apply refuses to change the node, and its revert restores etcd first,
// once etcd has stayed down for 20 s (it is down for a while after a boot
// too): the decrypted file checked against its record, EtcdRecover, then
// Bootstrap with recover_etcd (talosctl bootstrap --recover-from), then
// the wait for etcd. Talos refuses to recover into a data directory that
// is not empty, so a running etcd is never overwritten.
//
// The version-skew guard: a config rendered by a client of another version
// carries that version's installer image and silently upgrades the node at
// its next install. Every step but talos_upgrade reads the node's version
// first and refuses to go on when it differs from the provider's pin. A
// node in maintenance mode answers no Version RPC: its Version resource
// (talosctl get version --insecure, the ISO's version) is checked before
// the first config, at plan and apply (guardMaintenance).
//
// Endpoints that do not answer are told once (reach.go): a step dials
// them first, and the first to find them down names the node, the
// endpoint, where it comes from and what to check; the others say in one
// line that it did not answer, pointing at that step.
//
// Secrets (the bundle, the talosconfig, age identities, previous configs)
// are decrypted in memory only and scrubbed from every diff, log line and
// diagnostic; state only ever holds them age-encrypted.
//
// Each step type is one declaration on providers/sdk (an sdk.StepType:
// name, description, attributes and outputs structs, rollback sentence,
// handlers) in its own file: machineconfig.go, bootstrap.go,
// kubeconfig.go, read.go, health.go, upgrade.go and image.go; provider.go lists them
// and holds the provider block (decoded in config.go). The attributes
// struct is the schema and the decoded inputs; the SDK does the envelope
// (gating, decoding, unknown values, scrubbing of every field that leaves
// the provider); the provider adds its own secrets and a YAML filter to
// each call's scrubber (New).
//
// The engine (package engine) drives the provider through
// providers.Interface. It runs as the plugin program migrate-provider-talos
// (cmd/migrate-provider-talos, providers/plugin); its schema, derived
// from the declarations, is generated into talosschema, which cmd/migrate
// compiles in: after changing a step type, run go generate
// ./providers/talos (or make generate).
// Its tests run against lab/talosnode, a real gRPC MachineService with mTLS.
package talos

//go:generate go run ../internal/genschema talos talosschema/schema.json
