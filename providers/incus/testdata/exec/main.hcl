# A long command inside an instance, run exactly once: each run appends a
# line to /root/count, and /root/marker (creates) is made last. The crash
# test kills the migrate process while it runs, and resumes.
variable "instance" {}

provider "incus" "host" {}

phase "data" {
  step "incus_exec" "dump" {
    instance = var.instance
    command  = ["sh", "-c", "echo run >> /root/count; sleep 3; echo done > /root/marker"]
    creates  = "/root/marker"
    revert   = ["rm", "-f", "/root/marker"]
  }
}
