# A service's cutover, cut down to its copy: the data copied while the
# service runs (warm, unless var.warm is false), 1% of it written by the
# service before it stops, the stop, the final pass (verified), and a
# check that the new instance serves (it answers at once: the window is
# the stop and the copy). BenchmarkServiceWindow measures it both ways.
variable "instance" {}
variable "serving_url" {}
variable "warm" { type = bool }

phase "move" {
  step "incus_sync" "warm" {
    for_each    = var.warm ? toset(["data"]) : toset([])
    instance    = var.instance
    source      = "/srv/app"
    destination = "/srv/copy"
    critical    = ["*.db"]
  }

  # What the service writes while it still runs: 3 of its 320 MB.
  step "incus_exec" "writes" {
    instance   = var.instance
    command    = ["sh", "-c", "for i in 0 1 2; do dd if=/dev/urandom of=/srv/app/media/f$i bs=1M count=1 conv=notrunc 2>/dev/null; done"]
    depends_on = [incus_sync.warm]
  }

  step "incus_exec" "stop" {
    instance   = var.instance
    command    = ["true"]
    depends_on = [incus_exec.writes]
  }

  step "incus_sync" "final" {
    instance    = var.instance
    source      = "/srv/app"
    destination = "/srv/copy"
    critical    = ["*.db"]
    final       = true
    after_warm  = var.warm
    depends_on  = [incus_exec.stop]
  }

  check "http_check" "serving" {
    url = var.serving_url
  }
}

service "app" {
  stop    = incus_exec.stop
  serving = http_check.serving
}
