# Phase 1 of the brief, "platform", against the lab's Talos node (a real
# Talos machine API over gRPC with mTLS; see lab/talosnode/doc.go for how
# it differs from a node). Start the node, then run the phase:
#
#   make build
#   bin/talos-lab --dir /tmp/talos-lab &
#   bin/migrate plan --runbook examples/talos-platform --state /tmp/talos-lab/state --var lab=/tmp/talos-lab
#   bin/migrate run --phase platform --runbook examples/talos-platform --state /tmp/talos-lab/state --var lab=/tmp/talos-lab --auto-approve
#
# What it writes (the rendered config, the kubeconfig) goes under the lab
# directory too, not into this one.
#
# On a real node, point talosconfig/secrets at your (age-encrypted) files
# and endpoints at the node.

variable "lab" {
  type        = string
  description = "The talos-lab --dir: its talosconfig, secrets.yaml and simulated node filesystem; the rendered config and kubeconfig are written to its rendered/."
}

provider "talos" "node" {
  talosconfig      = "${var.lab}/talosconfig"
  secrets          = "${var.lab}/secrets.yaml"
  version          = "v1.13.3" # what the node runs: the version-skew guard
  cluster_name     = "lab"
  cluster_endpoint = "https://127.0.0.1:6443"
  install_disk     = "/dev/vda"
  extensions       = ["siderolabs/i915"] # Intel iGPU firmware for Jellyfin and Frigate
}

phase "platform" {
  description = "Disqualifying tests first, then the whole machine in one file."

  # The brief's data test: "a pod writes a file, and talosctl read sees it".
  # Here the host side of the virtiofs share is the lab's node filesystem.
  step "exec" "pod_writes_probe" {
    command = ["sh", "-c", "mkdir -p ${var.lab}/rootfs/var/mnt/data && printf ok > ${var.lab}/rootfs/var/mnt/data/.probe"]
    revert  = ["rm", "-f", "${var.lab}/rootfs/var/mnt/data/.probe"]
  }

  step "talos_machine_config" "node" {
    patches     = ["patches/node.yaml"]
    try_timeout = "1m"
    rendered    = "${var.lab}/rendered/controlplane.yaml"
    verify = {
      services = ["apid", "machined"]
      files    = { "/var/mnt/data/.probe" = "ok" }
    }
    depends_on = [exec.pod_writes_probe]
  }

  step "talos_bootstrap" "etcd" {
    depends_on = [talos_machine_config.node]
  }

  step "talos_kubeconfig" "admin" {
    path       = "${var.lab}/rendered/kubeconfig"
    depends_on = [talos_bootstrap.etcd]
  }

  check "talos_read" "virtiofs_visible" {
    path   = "/var/mnt/data/.probe"
    expect = "ok"
  }

  check "talos_service_health" "control_plane" {
    services = ["etcd", "apid"]
  }
}
