# A Talos node brought up in an Incus VM: its machine config (the first
# one, with the cluster's keys, never crosses the LAN: it is the VM's
# cloud-init user-data, its config drive, set through the Incus host's
# API), the VM booted from the ISO, installed (its authenticated API
# answers), the config cleared from the instance, etcd bootstrapped, the
# admin kubeconfig (age-encrypted), the node Ready. The call says which
# talos provider block: providers = { talos = talos.NAME }.

variable "vm" {
  type = string
}

variable "patch" {
  type = string
}

variable "services" {
  type        = list(string)
  description = "What answers once it is installed."
}

variable "try_timeout" {
  type    = string
  default = null
}

variable "rendered" {
  type    = string
  default = null
}

variable "cpu" {
  type = number
}

variable "memory" {
  type = string
}

variable "root_size" {
  type = string
}

variable "mac" {
  type = string
}

variable "iso" {
  type        = object({ pool = string, name = string })
  description = "The Talos ISO volume it boots from."
}

variable "devices" {
  type        = any
  default     = {}
  description = "Its other devices."
}

variable "host" {
  type        = object({ storage_pool = string, data_pool = string, data_volume = string, igpu_pci = string, lan_nic = map(string) })
  description = "The host's pools, data volume, iGPU (none: \"\") and LAN (local.host)."
}

variable "kubeconfig" {
  type = string
}

variable "node" {
  type    = string
  default = null
}

step "talos_machine_config" "config" {
  first_install = "nocloud"
  patches       = [var.patch]
  try_timeout   = var.try_timeout
  rendered      = var.rendered
  verify        = { services = var.services }
}

step "incus_instance" "vm" {
  name   = var.vm
  type   = "virtual-machine"
  empty  = true
  cpu    = var.cpu
  memory = var.memory
  config = {
    "security.secureboot"  = "false" # the Factory's ISO is not signed for Secure Boot
    "cloud-init.user-data" = talos_machine_config.config.user_data
  }
  devices = merge({
    root    = { type = "disk", pool = var.host.storage_pool, path = "/", size = var.root_size }
    data    = { type = "disk", pool = var.host.data_pool, source = var.host.data_volume, path = "/var/mnt/data" } # virtiofs tag incus_data
    lan     = merge(var.host.lan_nic, { hwaddr = var.mac })
    install = { type = "disk", pool = var.iso.pool, source = var.iso.name, "boot.priority" = "10" }
    cidata  = { type = "disk", source = "cloud-init:config" } # the config drive
  }, var.host.igpu_pci == "" ? {} : { igpu = { type = "gpu", gputype = "physical", pci = var.host.igpu_pci } }, var.devices)
  start = true # no wait_for: on the LAN, only the router knows its address
}

step "talos_service_health" "installed" {
  services   = var.services
  depends_on = [incus_instance.vm]
}

# Installed: the cluster's keys leave the instance's config, and the
# drive goes (rollback puts the drive back, not the key).
step "incus_device" "config_cleared" {
  instance     = incus_instance.vm.name
  name         = "cidata"
  ensure       = "absent"
  unset_config = ["cloud-init.user-data"]
  depends_on   = [talos_service_health.installed]
}

step "talos_bootstrap" "etcd" {
  depends_on = [talos_service_health.installed]
}

step "talos_kubeconfig" "admin" {
  path       = var.kubeconfig
  depends_on = [talos_bootstrap.etcd]
}

# node_spec: the plan judges every pod against the node before it exists.
step "kubernetes_ready" "node" {
  kubeconfig    = talos_kubeconfig.admin.path
  node          = var.node
  timeout       = "10m"
  node_spec     = talos_machine_config.config.node
  node_capacity = { cpu = var.cpu, memory = var.memory }
}

output "kubeconfig" {
  value = talos_kubeconfig.admin.path
}

output "vm" {
  value = incus_instance.vm.name
}
