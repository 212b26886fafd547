// Package talosvm is what a VM booted from the Talos ISO is in the lab home
// server: the lab's Incus server (lab/incushost) calls Boot when it starts a
// VM with the Talos ISO attached, and Stop when it stops it.
//
// Boot starts a lab Talos node (lab/talosnode) in maintenance mode on
// Spec.Addr:50000, a loopback address of 127.0.0.0/8 the caller picks (on
// Linux every address of 127/8 is local without setup), with the VM's
// disks. The node runs the ISO it booted (Spec.ISO, lab/factory's
// format): its Talos version (the Version resource of talosctl get
// version --insecure, and the installed node's until an install or
// upgrade says otherwise) and, in maintenance mode, its schematic's
// extensions (ExtensionStatus resources, the "schematic" one with its
// ID). A file without the lab ISO's header (an empty placeholder) does
// not boot: Boot returns a NoBootableMediumError (the firmware's "No
// bootable option or device was found"), which lab/home turns into a VM
// that runs and answers nothing. What its devices give the node:
//
//   - The `data` disk device (virtiofs, tag incus_data) is Spec.DataDir:
//     after the install, a machine config with an ExternalVolumeConfig of
//     virtiofs on that tag (examples/homelab/patches/node.yaml) makes the
//     node's /var/mnt/<name> that directory (Read serves it). Without the
//     document nothing is mounted.
//   - The `gpu` device (Spec.GPU): the i915 driver loads (i915 in
//     /proc/modules, its "[drm]" lines in dmesg) only when the running
//     image's schematic carries siderolabs/i915: the ISO's in maintenance
//     mode, the installer image's once installed; with it, the render
//     node /dev/dri/renderD128 that a pod given /dev/dri opens (see
//     lab/talosnode). The node knows the
//     installer's schematic from the installer image of its config
//     (…/metal-installer/<schematic id>:<version>, what the talos provider
//     writes from its extensions), looked up in KnownSchematics,
//     Spec.Schematics, then the schematics registered with the lab's
//     Image Factory (Spec.Factory). So a VM without the gpu device
//     reproduces the brief's discovery: no driver, whatever the schematic.
//
// A nocloud ISO (lab/factory's nocloud-<arch>.iso) boots the node's
// nocloud platform: with a config drive (Spec.UserData, the user-data of
// the VM's cloud-init:config disk, which lab/incushost takes from its
// cloud-init.user-data) the node validates that config and installs from
// it without ever serving the maintenance API; without one it waits in
// maintenance mode, as a metal ISO does. The node is given the drive's
// user-data, not a cidata volume it finds among its disks (see
// lab/talosnode's doc for the rest of what differs).
//
// The VM's NICs (Spec.NICs: name and MAC, from its nic devices' hwaddr or
// volatile.<dev>.hwaddr) are the node's links (network.LinkStatus), so
// that a client tells the VM by its MAC (talosctl get links --insecure).
//
// After the bootstrap, the node's Kubernetes is real (lab/kubecp): etcd,
// kube-apiserver on Addr:6443, controller manager, scheduler, and kwok as
// the kubelet of a Node named after the config's hostname, registered with
// the labels and taints Talos gives it (machinery's K8sNodeConfig: on 1.13
// the control-plane taint unless cluster.allowSchedulingOnControlPlanes,
// plus machine.nodeLabels/nodeTaints; on 1.14 the KubeNodeConfig document). The binaries are
// built once (lab/kubecp/build-kube.sh); the first Boot that bootstraps says so
// on Spec.Log with progress and how long it took. The kubeconfig the node's
// Kubeconfig RPC returns reaches it when the config's cluster endpoint is
// https://Addr:6443 (Endpoint). A reboot of the node stops and restarts its
// Kubernetes; Stop stops all of it.
//
// The node runs the commands of its Job pods (lab/kubecp, given the node's
// HostPath): a hostPath /var/mnt/data is the `data` share once the
// ExternalVolumeConfig mounted it, so a Job writes a file there that the
// host's data directory and the node's Read both see; before (or without
// the device) /var/mnt/data does not exist on the node and a hostPath of
// type Directory fails the pod with kubelet's type-check message. No image
// is pulled: the commands are the host's (see lab/kubecp's doc).
package talosvm
