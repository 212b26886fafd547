# The platform phase of the brief: one Talos node, its whole machine in
# patches kept in git, secrets age-encrypted beside them.
variable "node_ip" { default = "10.0.0.50" }

provider "talos" "node" {
  endpoints        = [var.node_ip]
  talosconfig      = "secrets/talosconfig.age"   # age-encrypted; decrypted in memory only
  secrets          = "secrets/secrets.yaml.age"  # the cluster PKI (talosctl gen secrets)
  version          = "v1.13.3"                   # what the cluster runs: the skew guard
  cluster_name     = "home"
  cluster_endpoint = "https://${var.node_ip}:6443"
  extensions       = ["siderolabs/i915"]         # Intel iGPU firmware for Jellyfin/Frigate
}

phase "platform" {
  description = "The node's whole machine config, through the safe ladder."

  step "talos_machine_config" "node" {
    provider    = talos.node
    patches     = ["patches/node.yaml"]
    try_timeout = "2m"
    rendered    = "rendered/controlplane.yaml"
    verify = {
      services = ["apid", "kubelet"]
      files    = { "/var/mnt/data/.probe" = "ok" }
    }
  }

  step "talos_bootstrap" "etcd" {
    provider   = talos.node
    depends_on = [talos_machine_config.node]
  }

  step "talos_kubeconfig" "admin" {
    provider   = talos.node
    path       = "secrets/kubeconfig.age"
    depends_on = [talos_bootstrap.etcd]
  }

  check "talos_read" "virtiofs-visible" {
    provider = talos.node
    path     = "/var/mnt/data/.probe"
    expect   = "ok"
  }

  check "talos_service_health" "control-plane" {
    provider = talos.node
    services = ["etcd", "kubelet", "apid"]
  }
}
