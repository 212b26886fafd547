# One application's move out of the old services VM: stopped (a database
# copied while it writes is not a copy; rollback starts it again), its
# data exported once onto the data volume (made aside, renamed when
# whole; the marker in the old VM says it is done), released on the node,
# and answering on its NodePort as a browser on the LAN reaches it.

variable "name" {
  type        = string
  description = "The application: its release, and apps/NAME of the data volume."
}

variable "instance" {
  type        = string
  description = "The old VM it runs in."
}

variable "stop" {
  type = list(string)
}

variable "start" {
  type = list(string)
}

variable "export" {
  type        = string
  description = "The export script (scripts/NAME-export.sh), run by sh -c in the old VM with env."
}

variable "env" {
  type = map(string)
}

variable "values" {
  type        = any
  description = "The values of its release of charts/app."
}

variable "health" {
  type        = object({ url = string, contains = optional(string) })
  description = "What a browser on the LAN asks, and what the answer contains."
}

step "incus_exec" "stop" {
  instance = var.instance
  command  = var.stop
  revert   = var.start
}

step "incus_exec" "export" {
  instance   = var.instance
  env        = var.env
  command    = ["sh", "-c", var.export]
  creates    = "/root/.${var.name}-exported"
  revert     = ["sh", "-c", "rm -rf /mnt/migrate-data/apps/${var.name} /mnt/migrate-data/apps/${var.name}.partial /root/.${var.name}-exported && { rmdir /mnt/migrate-data/apps 2>/dev/null || true; }"]
  timeout    = "1h"
  depends_on = [incus_exec.stop]
}

step "helm_release" "app" {
  name       = var.name
  chart      = "charts/app"
  namespace  = "media"
  values     = var.values
  depends_on = [incus_exec.export]
}

check "http_check" "health" {
  url      = var.health.url
  contains = var.health.contains
  timeout  = "5m"
}
