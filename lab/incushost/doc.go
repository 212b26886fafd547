// Package incushost is the lab's Incus host: a server of the Incus REST
// API in one Go process, speaking what providers/incus/incusapi speaks
// (the daemon's envelope, operations, ETags, errors worded as the daemon
// words them), so that the incus provider and its tests run against it as
// against a real daemon.
//
//	s, _ := incushost.New(incushost.Options{Dir: dir, Seed: true, BootVM: hook})
//	s.Listen(dir + "/unix.socket")          // trusted, as the daemon's socket (Serve: the same, blocking)
//	addr, _ := s.ServeHTTPS("127.0.0.1:0")  // client certificates; pin s.CertPEM()
//	defer s.Close()
//
// Layout of Dir: instances/NAME/{meta.json,rootfs/,logs/,snapshots/SNAP/},
// images/ALIAS/rootfs/ (an image is a directory tree, copied as a new
// instance's rootfs: ImportImage, Skeleton, Busybox), storage/POOL/ (custom
// volumes; an imported ISO's bytes; a filesystem volume's files in
// custom/NAME/), certs/ (trusted clients) and the
// server's certificate. Seed creates the lab-base image and the brief's
// three old VMs (services, matrix, k3s), running, with a user.lab key,
// and the files of what they run where their packages keep them
// (seed.go): in services, Samba's smb.conf, Debian's jellyfin (its
// databases in /var/lib/jellyfin/data, its configuration in
// /etc/jellyfin) and Frigate by Docker Compose (/opt/frigate/config:
// config.yml and frigate.db); in matrix, Debian's matrix-synapse (the
// SQLite database and media under /var/lib/matrix-synapse, the
// homeserver.yaml, log.yaml and signing key under /etc/matrix-synapse,
// the yaml with secrets of its own, random at each seeding, mode 0600);
// in k3s its kubeconfig. A stand-in systemctl records its calls and each
// unit's state (running until stopped). services and matrix have
// boot.autostart = true, as a home server's VMs that start with it; k3s
// has none. With Options.OldHost the old VMs are Debian hosts instead
// (debian.go, debian_layout.go, debian_apps.go; the stand-ins in
// debian/): lab/debroot's root with its /usr an overlay below each VM's
// own, Debian's PostgreSQL and Samba, the apps as their packaging lays
// them out, a systemctl that runs the real unit files and a docker for
// the Compose Frigate; each VM boots its enabled units whenever it
// starts. docs/lab-debian.md tabulates each fact, its source and what
// still differs.
//
// Commands (exec, record-output mode) run for real. A running container
// has an init: the lab's executable started again (an init function of
// this package takes over when MIGRATE_INCUSHOST_CHILD is set) in new
// user, mount and PID namespaces, that bind-mounts the host's /usr (and
// /bin, /lib... where the host has them as directories) read-only where
// the rootfs lacks them, binds /dev/null and friends, mounts /proc,
// chroots into the rootfs (the mounts and namespaces are lab/sandbox's)
// and then forks each command it is sent (with its stdout and stderr
// files over a unix socket), reaping them as PID 1.
// The commands of an instance thus see each other in /proc; stopping the
// instance kills its init, and with it everything it started.
// Options.OnExec is told of every command started (the instance, the
// argv): lab/home keeps them in its events log.
//
// VMs: an instance of type virtual-machine with a disk whose source is an
// ISO (an iso volume, or a host file named *.iso) boots through
// Options.BootVM when started (VMSpec: config, disks with sizes, the
// shared directory, whether a gpu device is attached, its 127.0.1.N
// address, reported as eth0's inet address) and its Guest is stopped on
// stop (and when the lab closes). A disk with source cloud-init:config is
// its config drive: VMSpec.ConfigDrive holds the files the daemon writes
// on it at each start (user-data from cloud-init.user-data, else
// user.user-data, else an empty #cloud-config; vendor-data; meta-data;
// network-config), as generateVMConfigDrive does; as the daemon, the lab
// refuses the drive with a pool, on a container at start, and a
// cloud-init.user-data or vendor-data that is a #cloud-config but no YAML.
// The guest gets the files, not an ISO labelled cidata.
//
// Differences from the real daemon (Incus 6.0), on purpose or by lack:
//
//   - A running container's init is the lab's, not the image's
//     /sbin/init: nothing runs but what is exec'ed into it. A graceful
//     stop therefore never times out (raw.lxc, lxc.signal.halt, means
//     nothing), state reports no memory or CPU use, and a failing image
//     init cannot make a start fail.
//   - A VM without an ISO disk (the old VMs) behaves as a container; a VM
//     booted through BootVM runs no commands (no agent) and its files are
//     its rootfs directory's, not the guest's.
//   - Disk devices of a container (a host path, a filesystem custom
//     volume's directory) are bind mounts made when it starts; one added
//     to or removed from a running container is mounted or unmounted at
//     once (hotplug: the init, asked over its control socket, reaches the
//     host's files through an fd of / kept from before its chroot). A
//     booted VM (BootVM) is told its shared directories at boot only: a
//     change of them while it runs is refused, saying so; its other disks
//     (block, ISO) change in the record, seen at its next boot. The files
//     API reads and writes the rootfs directory, under the mounts: a file
//     in a mounted volume is seen by the container's commands, not by it.
//   - Mount points the init needs (/usr or /usr/bin..., /dev/null...,
//     symlinks bin -> usr/bin where the host has them) are created in the
//     rootfs when absent, and stay visible through the files API.
//   - Networks: one managed network (Options.Network, "labbr0"), and
//     "lo" listed unmanaged as the host's interface, and with Options.LAN
//     the host's own bridge to the LAN, unmanaged (lan.go): a NIC bridged
//     onto it gets its address from Options.LANLease (the home router's
//     DHCP, by MAC), which the instance's state does not show, as the
//     daemon cannot see it either; with Options.LANPhysical too, a
//     managed network of type physical over that bridge, as IncusOS lists
//     after its direct-attach tutorial, which a NIC names instead (what
//     still differs: the lab keeps no network config of it beyond parent,
//     and cannot be asked to create or delete such a network); otherwise no DHCP:
//     every instance has a 127.0.1.N address (127.B.x.y with
//     Options.AddressBlock B) from its creation; a running
//     instance reports it on each NIC (and a booted VM on eth0), and the
//     network's leases list it by the NIC's MAC.
//   - Storage: the pools of Options.Pools (default "default"; the first
//     is the default profile's root disk pool), all "dir"; a filesystem
//     volume holds files (a directory), a block volume no bytes (its size
//     is what a VM's guest is told), an ISO its file.
//   - Images: only local aliases (no image endpoints, no remote images).
//     Profiles: config and devices, no project.
//   - The incus CLI (Debian's incus-client 6.0) drives it over HTTPS
//     with the everyday commands a person looks at a host with (tested
//     in cli_test.go): remote add with a trust token (`incus config trust
//     add`, trust.go), list, info, config show, exec (record-output, and
//     over websockets: pipes, or a terminal whose size follows the
//     control channel; signals are not forwarded), file pull and push
//     (SFTP, sftp.go: the rootfs, not what is mounted over it), start,
//     stop, snapshot create and list, storage list, storage volume list
//     (custom volumes only: no instance volumes), network list, profile
//     list, operation list and monitor (operation and lifecycle events,
//     no logging). WriteClientConfig makes an INCUS_CONF whose default
//     remote is the lab, with a trusted client certificate. The API
//     extensions advertised are the daemon's names for what it
//     implements (extensions.go). Images, projects, backups (an empty
//     list), console and file mount are not there.
//   - Validation (validate.go): config keys (known ones, their value
//     syntax, container-only and VM-only keys), device types and options,
//     boot.priority, the root-only size, the forms of a disk's source (a
//     source or a path, a local one absolute and existing), a NIC's
//     parent where its nictype needs one, no nictype or parent beside a
//     network (Incus's refusal), its MAC's syntax, and the
//     pool, custom volume and network a device names are checked with
//     the daemon's words, on creation (the operation fails) and on a
//     change (the request fails); the corpus in providers/incus/incusapi
//     holds both servers to the same answers.
//     Not held: the rarer keys the table lacks (refused, as unknown:
//     add them from the daemon's list), the value syntax of free-form
//     keys (limits.cpu.allowance, snapshots.schedule, raw.*), and what
//     the daemon checks only when an instance starts: gputype and pci
//     matching real hardware (it accepts gputype = "weird" at creation
//     too), a bridged NIC's parent existing, and which changes need a
//     stopped instance.
//   - Hardware (resources.go): /1.0/resources reports what
//     Options.Hardware describes (CPU threads, memory, GPUs with their PCI
//     addresses, drivers and DRM nodes, disks), not the machine's: the lab
//     has no PCI bus of its own (nil: no GPU, no disk, the machine's CPU
//     count); its network cards, NUMA nodes, CPU sockets and firmware are
//     empty. A pool's resources are Hardware.PoolSizes (used: the bytes
//     its directory holds), else the file system it lies on; inodes are 0.
//   - A VM booted through BootVM runs no agent: its state reports -1
//     processes (the daemon hears only QEMU then), and its files, SFTP
//     and commands are refused with the daemon's "VM agent isn't currently
//     running" (500). A running old VM reports its init and commands.
//   - A VM's agent can be made hostile (agent.go, SetGuestAgent): its
//     directory listings are then what the test says (names with ".."
//     or "/", a directory that contains itself, a huge listing), passed
//     on as the daemon passes on a VM agent's; a container's cannot.
//   - Operations cannot be cancelled ("This operation can't be
//     cancelled"), as a record-output exec on the daemon.
//   - Owners: as root, the lab keeps the uids and gids of files (the user
//     namespace maps 0-65535 to the same IDs). Run as another user (no
//     root needed: tried as nobody), every file is that user's, the
//     files API ignores uid and gid, a command may only run as user 0
//     (that user, mapped) and /proc may not be mountable (a container's
//     masked /proc), so the commands of an instance do not see each other.
//   - Restarting the lab process: instances keep their status, but a VM
//     booted through BootVM is Stopped (its guest died with the process).
package incushost
