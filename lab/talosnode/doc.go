// Package talosnode is the lab's Talos node: a server for the real Talos
// machine API (machine.MachineService from
// github.com/siderolabs/talos/pkg/machinery v1.13.3) that behaves like one
// installed, metal, controlplane Talos node, so that the Talos provider runs
// the same client code (machinery's client package, a talosconfig, mTLS)
// against it as against a real node.
//
// # Maintenance mode (Options.Maintenance, talos-lab --maintenance)
//
// A node started with Maintenance and no persisted config is one booted
// from the Talos ISO, as machined's maintenance service (Talos v1.13) serves
// it:
//
//   - TLS with a self-signed certificate made at boot, no client
//     certificate asked for: talosctl --insecure (client.WithTLSConfig with
//     InsecureSkipVerify) connects; a talosconfig's CA does not verify it.
//     Every client is os:reader (authz injector in ReadOnly mode; no
//     SideroLink peer gets os:admin here).
//   - ApplyConfiguration, opened to readers in maintenance only: modes AUTO,
//     REBOOT and TRY are taken, others answer Unimplemented "apply
//     configuration --mode='no-reboot' is not supported in maintenance
//     mode"; a config that does not parse is "failed to parse config: ...";
//     it is validated for a metal node that must install (install disk
//     required), a failure InvalidArgument "configuration validation failed:
//     ..."; the reply carries only the warnings; a dry run answers "Dry run
//     summary:\nNode is running in maintenance mode and does not have a
//     config yet." and changes nothing.
//   - Version, Upgrade, Reset answer Unimplemented "API is not implemented in
//     maintenance mode" (they need os:admin): on a real node too, `talosctl
//     version --insecure` gets this error, so a client cannot learn the
//     version before the install. Methods readers may not call answer
//     PermissionDenied "not authorized"; the others Unimplemented.
//   - The COSI resource API (cosi.resource.State, what talosctl get uses):
//     Get, List and Watch of block.Disk (namespace runtime, one per disk
//     of Options.Disks: dev_path, size and pretty_size, model, serial, wwid,
//     transport, readonly, cdrom, rotational, io/sector size 512) and the
//     ResourceDefinitions talosctl resolves "disks" with (namespace meta);
//     no block.SystemDisk before the install (so CEL's system_disk is false
//     for every disk then); network.LinkStatus (namespace network, what
//     talosctl get links --insecure lists: how a client tells by its MAC
//     which machine answers at an address) of lo and each NIC of
//     Options.NICs (links.go). Writes answer PermissionDenied.
//   - After the first ApplyConfiguration (not a dry run) the reply is sent,
//     then the maintenance service stops (connection refused), the
//     "installer" checks machine.install.disk against the disks (or its
//     diskSelector, as machinery's DiskMatchExpression reads it, which
//     must match exactly one) and the
//     image's tag, persists the config, records the image and disk
//     (Install), derives secrets.yaml from the config (the node's PKI is now
//     the config's) and writes a talosconfig; after RebootDuration the node
//     serves its installed mTLS API on the same address, running the
//     installer's tag, with block.SystemDisk naming the install disk;
//     Installed() is closed then. The talosconfig of the bundle the config
//     came from works against it. A failed install logs why in dmesg and the
//     node comes back in maintenance mode without a config.
//   - A restart of a node that is installed boots it installed, --maintenance
//     or not (the disk, not the ISO, boots).
//
// # What it does like a node
//
//   - Identity and TLS. New generates (or loads) Dir/secrets.yaml with
//     machinery's generate/secrets, the initial controlplane config with
//     generate.NewInput (install disk /dev/sda, the node version's contract,
//     installer image ghcr.io/siderolabs/installer:<version>; Kubernetes
//     KubernetesVersionOf the version), an apid server
//     certificate for 127.0.0.1, ::1, localhost and the hostname signed by the
//     bundle's OS CA, and an os:admin client certificate. The server requires
//     and verifies client certificates against the OS CA; roles come from the
//     certificate's Organization and are checked with machined's rules
//     (ApplyConfiguration, Bootstrap, Read, Kubeconfig, Upgrade: os:admin;
//     Reboot: admin/operator; Version, ServiceList, Dmesg, Hostname: any role);
//     a missing role is PermissionDenied "not authorized".
//   - Routing metadata as apid does it. No metadata or "node" (one-to-one):
//     errors are gRPC statuses. "nodes" (one-to-many): the call succeeds and a
//     node error travels in the message's common.Metadata (error, status,
//     hostname) exactly like apid's BuildError; the client's helpers
//     (FilterMessages, ReadStream) turn it back into an error. A node name
//     must be this node (its hostname, localhost, 127.0.0.1, ::1 or the listen
//     host); another name answers Unavailable ("dial tcp X:50000 ... no route
//     to host"), a name with a port answers Internal `invalid target "..."`
//     (apid's NewAPID), a multi-valued "node" InvalidArgument.
//   - ApplyConfiguration follows machined v1.13 on a 1.13 node: configloader.NewFromBytes,
//     "doesn't contain v1alpha1 config" refusal, Validate in the metal mode of
//     an installed node (RequiresInstall false, not strict: warnings are
//     returned in the response, not errors), the Kubernetes image tag checks of
//     RuntimeValidate against the version the node runs; any failure is
//     InvalidArgument with the validation text. The modes: AUTO resolves to
//     NO_REBOOT or REBOOT with machined's CanApplyImmediate (only the listed
//     v1alpha1 fields — cluster, debug, machine.network/install/kubelet/... —
//     and any non-v1alpha1 document change live; e.g. machine.env or
//     machine.files need a reboot), answering "Applied configuration with a
//     reboot: this config change can't be applied in immediate mode\ndiff:..."
//     when it does; NO_REBOOT and TRY refuse such changes with InvalidArgument;
//     REBOOT persists and reboots; STAGED persists for the next boot; TRY runs
//     the config in memory only and reverts to the config that ran before it
//     after try_mode_timeout (default 1m) unless a non-TRY apply comes first.
//     That is a 1.13 node (Options.Version v1.13.x). A 1.14 node (v1.14.x)
//     follows machined v1.14 instead (release.go): REBOOT on an installed
//     node answers Unimplemented "the REBOOT mode is not supported, please
//     use AUTO or NO_REBOOT modes instead", AUTO resolves to NO_REBOOT
//     ("AUTO(NO_REBOOT)"), and no change needs a reboot (no
//     CanApplyImmediate). Its own config is rendered with the 1.14 contract
//     (multi-document Kubernetes config, UnattendedInstallConfig, whose disk
//     selector the install matches against the machine's disks). A 1.13
//     node's loader refuses the document kinds machinery v1.13 does not
//     register ("not registered"), as a real 1.13 node refuses a config
//     rendered for 1.14; both validate with the linked machinery (v1.14.1).
//     Dry run answers ModeDetails "Dry run summary:\n<details> (skipped in
//     dry-run).\nConfig diff:\n\n<configdiff.DiffConfigs(running, new)>" or
//     "No changes."; the diff is NOT redacted (secrets that change show).
//   - The v1.13 TRY quirk (siderolabs/talos#14343): every non-TRY request,
//     a dry run or an invalid config included, cancels a pending TRY rollback
//     before anything else, so a dry run during a TRY window makes the TRY
//     config permanent in memory. Options.TryRollbackFix models the fixed
//     behaviour (cancel only on a real apply).
//   - The persisted config lives in Root()+"/system/state/config.yaml"
//     (ConfigPath): Read serves it like a node does, and it is what the node
//     boots with. A TRY does not change it; a restart of the lab node, like a
//     reboot, drops a pending TRY.
//   - Read streams a regular file under Root() in common.Data chunks of 4 KiB;
//     a missing file is NotFound "stat /path: no such file or directory", a
//     directory is Unknown "path must be a regular file". ".." is resolved
//     lexically and stops at the node's "/", so no host file is reachable; a
//     symlink that leads out of Root() is PermissionDenied. Root() has
//     var/mnt/data (the virtiofs volume of the brief) when the node is no
//     VM (Options.Shares nil: a VM's /var/mnt is its shares'), and
//     /proc/sys/kernel/random/boot_id (BootIDPath), new at every boot: read it
//     before and after a reboot or upgrade to see that the node rebooted, as
//     talosctl does.
//   - The VM's devices (lab/talosvm sets them): Options.Shares are virtiofs
//     shares by tag; at each boot and each change of the running config
//     (volume documents apply without a reboot), an ExternalVolumeConfig
//     of virtiofs whose source is a shared tag mounts that host directory
//     at /var/mnt/<name> (Read serves it, dmesg says so); a tag no device
//     has logs the mount failure, and without the document nothing is
//     mounted. HostPath maps a node path to the host (a share's directory
//     or under Root()), refusing ".." and symlinks out of them: lab/kubecp
//     mounts pods' hostPath volumes so.
//     Options.GPU with a running image whose extensions include
//     siderolabs/i915 (in maintenance mode Options.BootExtensions, the
//     ISO's; installed, the installer image's, Options.Extensions) loads
//     the driver:
//     /proc/modules lists i915 and dmesg has its "i915 0000:00:02.0: [drm]"
//     lines, and the driver's device nodes exist: /dev/dri/card0 and the
//     render node /dev/dri/renderD128 (character devices with the null
//     device's numbers, 1:3, as this machine has no DRM device: they
//     open read-write; a pod mounts /dev/dri by hostPath) and their sysfs
//     entries /sys/class/drm/{card0,renderD128}/dev ("226:0", "226:128",
//     DRM's numbers: what the Talos API's Read serves, as it serves only
//     regular files; List, talosctl ls, shows the device nodes); otherwise /proc/modules has no i915 and neither
//     /dev/dri nor /sys/class/drm exists. In maintenance mode the
//     node reports the image it booted as resources readable with
//     --insecure: Version (runtime, id "version": Talos and
//     Options.Version) and one ExtensionStatus per extension of
//     Options.BootExtensions, then "schematic" whose version is
//     Options.BootSchematic, as Image Factory images carry it.
//   - Options.ControlPlane (lab/kubecp through lab/talosvm) is started by
//     the bootstrap and at each boot of a bootstrapped node, stopped by a
//     reboot and by Stop; ServiceList's etcd health is then its real etcd's
//     (EtcdStartup is not used).
//   - Bootstrap: the first call creates /var/lib/etcd/member and etcd runs
//     (ServiceList: etcd Running, healthy; before: etcd "Preparing", health
//     unknown). Right after the bootstrap etcd stays "Preparing" for
//     Options.EtcdStartup (default 1s), as a node's etcd takes a moment to
//     start: a health check must wait for it. Every later call is AlreadyExists "etcd data directory is not
//     empty", as on a node; a worker config answers FailedPrecondition.
//   - EtcdSnapshot (os:admin, os:operator, os:etcd:backup; control plane
//     only, etcd.go): the running etcd's snapshot in common.Data chunks,
//     as machined streams its etcd client's Snapshot: with
//     Options.ControlPlane the real etcd's (Maintenance.Snapshot: the
//     bbolt file, then its SHA-256), else the simulated etcd's database
//     (one page naming the cluster, and a page per PutEtcd) with its
//     SHA-256 appended, in the same format; etcd not running fails
//     "failed reading etcd snapshot: etcd is not running on this node".
//     EtcdRecover (os:admin) keeps the uploaded stream at
//     /var/lib/etcd.snapshot (FailedPrecondition "etcd service is not
//     ready for recovery yet" when /var/lib is not there); Bootstrap with
//     recover_etcd then restores etcd's data directory from it before
//     etcd starts, as machined's etcd service does: the size must be
//     512-byte pages plus the SHA-256 and the SHA-256 must match (unless
//     recover_skip_hash_check), without an upload it fails "error
//     verifying snapshot"; the real etcd is restored by etcdutl's
//     snapshot restore (the code Talos links; lab/kubecp builds etcdutl),
//     the simulated one by its database. LoseEtcd (for tests) stops etcd
//     and the node's Kubernetes and empties /var/lib/etcd: the node then
//     waits for a bootstrap (etcd Preparing), as a node whose etcd data
//     is gone does.
//   - Kubeconfig: one common.Data message holding a .tar.gz with one file
//     named "kubeconfig" (what client.Kubeconfig unpacks): cluster named after
//     the config's cluster name, server = cluster.controlPlane.endpoint, CA =
//     the cluster CA, context/user "admin@<cluster>", client certificate
//     CN=admin O=system:masters signed by that CA. Available before bootstrap,
//     as on a node.
//   - Dmesg: one common.Data per line, "<facility>: <priority>: [RFC3339Nano]:
//     <message>\n" (machined's format; the text keeps the kernel record's
//     newline, talosctl prints it as is), with lines for
//     boots, applies, reverts, reboots, bootstrap and upgrades; follow streams
//     new lines; tail starts at the end.
//   - ServiceList: apid, containerd, cri, etcd, kubelet, machined, syslogd,
//     trustd, udevd with state, events and health.
//   - Upgrade, the current way (Talos 1.13 on, abboot.go and
//     lifecycleapi.go): ImageService.Pull streams a layer's progress
//     (downloading, complete, extracting, complete) and the image's name
//     pinned to a digest, and puts the image in the system containerd's
//     store until the next boot; LifecycleService.Upgrade runs the
//     installer of a pulled image only (else Internal "upgrade failed:
//     installer image ... not found in containerd store", as machined's
//     installer container fails), streams its lines and exit code (1 when
//     compatibility.UpgradeableFrom refuses the jump) and does not
//     reboot; the client's Reboot boots the new partition.
//     LifecycleService.Install on an installed node is AlreadyExists. A node
//     of an older release (Options.Version v1.12.x) answers both services
//     Unimplemented "unknown service machine.ImageService", as gRPC does for
//     a service its server lacks.
//   - Upgrade, the legacy call (MachineService.Upgrade): the image reference
//     must carry a tag (the "installer" is not pulled); on a controlplane
//     without etcd running and without force it fails like the pre-upgrade
//     etcd checks ("failed to create etcd client: ..."); it answers
//     "Upgrade request received", reboots and comes back with the tag as
//     its version, unless compatibility.UpgradeableFrom refuses the jump
//     (the node then boots its old version and dmesg says why). stage=true
//     installs at the next reboot. The machine config is not changed:
//     machine.install.image is only what a node would install from at
//     (re)install time and what talosctl puts there — the version skew of
//     the brief lives in that field.
//   - A/B boot partitions: both upgrades write the partition not running
//     (A, then B, then A...) and the next boot runs it; the other keeps what
//     ran before (Boot returns both: version, installer image, its
//     schematic, its extensions). FallBackAtNextUpgrade (talos-lab
//     --fall-back-at-next-upgrade) makes the next new partition fail to
//     boot: the kernel log says so ("Kernel panic", "boot entry B ... failed
//     to boot ... booting entry A again") and the node comes back healthy,
//     running what it ran, as a node whose bootloader's boot counting ran
//     out does. The installed node reports what it runs as resources, at
//     every boot: Version and one ExtensionStatus per official extension of
//     its installer image (Options.Extensions), then "schematic" whose
//     version is the image's schematic ID, and "modules.dep" (author
//     "Talos Machinery", the kernel's version) when an extension brings
//     kernel modules (i915, amdgpu, zfs...), as the installer makes it (the
//     ISO's resources in maintenance mode do not have it yet). The
//     schematic ID is the path element after ".../metal-installer/" or
//     ".../installer/" of a factory reference (SchematicOf); the plain
//     ghcr.io/siderolabs/installer has none.
//   - Reboot (and REBOOT/AUTO applies, Upgrade): about 50 ms after the reply
//     the API answers Unavailable ("connection refused") for RebootDuration
//     (default 1s), open streams end Unavailable, then the node boots from
//     its persisted config and state.
//   - Version: the installed tag, platform metal/metal, RBAC feature on.
//   - Links (network.LinkStatus, namespace network) of lo and
//     Options.NICs, the same in maintenance mode and installed: a NIC's
//     MAC does not change with the install.
//   - Other MachineService methods answer Unimplemented.
//
// # Differences from a real node
//
//   - One node only; the listener stays up during a simulated reboot (calls
//     get Unavailable from the node instead of TCP errors), and reboots last
//     RebootDuration instead of minutes.
//   - Metadata.hostname is set in every response: to the name the client used
//     ("node"/"nodes"), or to the hostname when it used none. A real node
//     leaves it empty unless apid proxied the call one-to-many: do not rely
//     on it.
//   - With "nodes" naming several aliases of this node, the node answers once.
//   - Only MachineService and, of the resource API, the disks (block.Disk,
//     block.SystemDisk) and the links (network.LinkStatus: lo, and each
//     NIC as a virtio ethernet link up with its MAC as hardwareAddr and
//     permanentAddr; lo's operationalState is unknown, as Linux reports
//     it; no addresses, routes or link specs) are served (readers may
//     Get/List/Watch; a real node serves every non-sensitive resource to
//     them): no other
//     resources (talosctl get members, volumestatus ...), of ImageService
//     only Pull, of LifecycleService Upgrade (Install refuses), no storage,
//     time, inspect or cluster services, no Events stream (talosctl's
//     --legacy upgrade watches Events). MachineService.Upgrade (what
//     client.UpgradeWithOptions calls, deprecated but served) works.
//   - Pull fetches nothing: any reference with a tag "exists" (a real node
//     answers NotFound for an image its registry lacks), its digest is the
//     SHA-256 of the reference, and no credentials or mirrors are used.
//     The installer writes no disk; the Containerd field of the requests
//     is not checked (the installer always runs from the system store); two
//     upgrades at once wait for each other instead of the second being
//     FailedPrecondition. A partition that fails to boot does so at once,
//     not after the bootloader's three tries; the fallback is only what
//     FallBackAtNextUpgrade asks, never a real fault of the image.
//
// Not checked with a real talosctl: the current upgrade (talosctl upgrade
// of 1.13+, image pull then LifecycleService) against this node was
// exercised with machinery's client only.
//
// Checked with the real talosctl v1.13.0 built from the module proxy:
// version, read (file, missing file), services, bootstrap twice,
// apply-config --dry-run / --mode=try --timeout / --mode=no-reboot (and the
// hostname conflict), dmesg, kubeconfig and an unknown --nodes name answer
// like a node. In maintenance mode, with talosctl v1.13.0 built from the
// module proxy (upstream containerd in place of Talos's fork, which the
// proxy does not serve): version --insecure (the Unimplemented error above),
// get disks --insecure (table and -o yaml), get systemdisk --insecure
// (empty), apply-config --insecure --dry-run, --mode=no-reboot (refused)
// and the apply of `talosctl gen config`'s controlplane.yaml; then, with
// its talosconfig, version, get disks, get systemdisk, services, bootstrap
// and dmesg; an insecure client is refused the TLS handshake then.
//   - With Options.ControlPlane (lab/talosvm's lab/kubecp), no kubelet
//     but kwok: only Job pods' commands run, from the host's /usr, in a
//     sandbox (lab/sandbox); see lab/kubecp.
//   - Without Options.ControlPlane, no real etcd, kubelet or Kubernetes:
//     ServiceList reports them; the kubeconfig points at the config's
//     endpoint (Options.Endpoint), where nothing may listen.
//   - Validation skips the install-disk selector and disk matching (an
//     installed node skips them too) and the sd-boot checks; the Kubernetes
//     compatibility check uses the version the node reports.
//   - The kernel log keeps its lines across simulated reboots.
//   - Maintenance mode: no installer is pulled and no disk is
//     written, the image only has to carry a tag; the install takes
//     RebootDuration, not minutes; no GenerateConfiguration, StorageService
//     (BlockDeviceWipe), MetaWrite or network resources; no SideroLink;
//     the maintenance certificate is a fresh self-signed leaf (a node's has
//     its own CA), valid for loopback and the hostname; a second apply while
//     the first installs answers Unavailable (a node has stopped listening
//     by then). The disks never change (no hotplug, no partitions, no
//     volumes: UserVolumeConfig is not provisioned).
//   - The nocloud platform (Options.Platform "nocloud", platform.go) is
//     given the config drive's user-data (Options.UserData), not a block
//     device labelled cidata to find and mount; its meta-data and
//     network-config are not read (no hostname or addresses from them),
//     nor the SMBIOS serial (ds=nocloud-net: user-data over HTTP) or a
//     #include. A user-data that does not load, validate or install
//     leaves the node in maintenance mode with the error in its log
//     (InstallFailures); a real node's boot fails on it.
//   - Bootstrap with recover_etcd restores before it answers, and answers a
//     snapshot that fails its checks or its restore as the RPC's error; on
//     a node the RPC starts etcd's service and such a failure shows in the
//     service's state and the log. The simulated etcd's database is not
//     bbolt (etcdutl would refuse it); the real one's is (Options.ControlPlane).
//   - Fail and Hang inject faults after routing: with "nodes" metadata an
//     injected error comes back in the response metadata like any node error.
package talosnode
