# A volume made in the same run as the instance whose disk names it: the
# instance refers to the volume step's outputs, so its plan waits for the
# volume (deferred), and the check that the volume exists runs once it
# does. source_by_name names the pool and volume by plain strings instead: the
# plan is made before the volume exists, and is refused, naming it.
variable "volume" {}
variable "instance" {}
variable "image" {}

variable "source_by_name" {
  default = false
}

provider "incus" "host" {}

phase "build" {
  step "incus_volume" "bulk" {
    name = var.volume
  }

  step "incus_instance" "node" {
    name  = var.instance
    type  = "container"
    image = var.image
    devices = {
      bulk = {
        type   = "disk"
        pool   = var.source_by_name ? "default" : incus_volume.bulk.pool
        source = var.source_by_name ? var.volume : incus_volume.bulk.name
        path   = "/mnt/bulk"
      }
    }
  }
}
