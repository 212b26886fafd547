# The Incus end of the brief's migration: once the Talos VM serves, the old
# VMs are stopped, never deleted, each after a snapshot, and kept so that
# `migrate rollback` starts them again. The cleanup phase may delete them
# only after their retain_until date.
#
# The tests run it against containers standing in for the old VMs (the REST
# calls are the same), passing their names as variables.
variable "home_vm" {
  default     = "old-home"
  description = "The old VM with the home services (Samba, Jellyfin, Frigate)."
}

variable "matrix_vm" {
  default     = "old-matrix"
  description = "The old Matrix homeserver VM."
}

variable "stop_timeout" {
  default = "30s"
}

variable "retain_until" {
  default = "2999-12-31"
}

provider "incus" "host" {}

phase "retire" {
  description = "Stop the old VMs, a snapshot first, kept for rollback."

  step "incus_instance_state" "old-home" {
    instance            = var.home_vm
    state               = "stopped"
    snapshot_before     = true
    keep_for_rollback   = true
    restore_on_rollback = true
    stop_timeout        = var.stop_timeout
    force_after         = true
  }

  step "incus_instance_state" "old-matrix" {
    instance          = var.matrix_vm
    state             = "stopped"
    snapshot_before   = true
    keep_for_rollback = true
    stop_timeout      = var.stop_timeout
    force_after       = true
  }
}

phase "cleanup" {
  description = "Delete the old VMs, once the way back is no longer needed."

  step "incus_instance" "delete-old-home" {
    name         = var.home_vm
    ensure       = "absent"
    retain_until = var.retain_until
  }

  step "incus_instance" "delete-old-matrix" {
    name         = var.matrix_vm
    ensure       = "absent"
    retain_until = var.retain_until
  }
}
