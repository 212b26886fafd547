# A new instance's address used by the step after it: the container gets
# an IPv4 lease on the test's managed network, and an exec step receives
# it, with its MAC, through the instance step's outputs.
variable "name" {}
variable "image" {}
variable "network" {}
variable "out" {}
variable "profile" {
  description = "A profile of the test's, after default (the crash test's holds the guest's DHCP back)."
}

provider "incus" "host" {}

phase "node" {
  description = "Create the node and hand its address on."

  step "incus_instance" "node" {
    name     = var.name
    type     = "container"
    image    = var.image
    start    = true
    profiles = ["default", var.profile]
    devices  = { eth0 = { type = "nic", network = var.network } }
    wait_for = "ipv4"
  }

  step "exec" "address" {
    command = ["sh", "-c", "printf '%s %s %s' \"$IP\" \"$MAC\" \"$STATUS\" > \"$OUT\""]
    env = {
      IP     = incus_instance.node.ipv4
      MAC    = incus_instance.node.mac
      STATUS = incus_instance.node.status
      OUT    = var.out
    }
  }
}
