# One application's move out of the old services VM: its data copied
# onto the data volume and its new image pulled onto the node while it
# still runs (the warm pass), then stopped (a database copied while it
# writes is not a copy; rollback starts it again), only what changed
# copied and both trees' manifests compared (the final pass), exported
# (the copy put in place and rewritten for the pod; the marker in the old
# VM says it is done), released on the node, and answering on its
# NodePort as a browser on the LAN reaches it.

variable "name" {
  type        = string
  description = "The application: its release, and apps/NAME of the data volume."
}

variable "instance" {
  type        = string
  description = "The old VM it runs in."
}

variable "data" {
  type        = map(object({ source = string, critical = optional(list(string), []) }))
  description = "Its trees in the old VM, each copied to /mnt/migrate-data/apps/NAME.sync/KEY for the export script; critical: the files copied only once it is stopped, compared by SHA-256 (its databases)."
}

variable "warm" {
  type        = bool
  default     = true
  description = "Copy the data while the app still runs, then only what changed once it is stopped; false: all of it once stopped (a cold copy)."
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

step "incus_sync" "warm" {
  for_each    = var.warm ? var.data : {}
  instance    = var.instance
  source      = each.value.source
  destination = "/mnt/migrate-data/apps/${var.name}.sync/${each.key}"
  critical    = each.value.critical
}

# The new image, pulled onto the node while the app still runs: its
# release then starts from the node's cache, and a pull of a large image
# is not inside the app's downtime. (The image must have a true command:
# Debian's and Alpine's do.)
step "kubernetes_job" "pull" {
  namespace = "media"
  name      = "${var.name}-image-pull"
  timeout   = "1h"
  job = {
    template = { spec = {
      restartPolicy = "Never"
      containers    = [{ name = "pull", image = var.values.image, command = ["true"] }]
    } }
  }
}

step "incus_exec" "stop" {
  instance   = var.instance
  command    = var.stop
  revert     = var.start
  depends_on = [incus_sync.warm, kubernetes_job.pull]
}

step "incus_sync" "final" {
  for_each    = var.data
  instance    = var.instance
  source      = each.value.source
  destination = "/mnt/migrate-data/apps/${var.name}.sync/${each.key}"
  critical    = each.value.critical
  final       = true
  after_warm  = var.warm
  depends_on  = [incus_exec.stop]
}

step "incus_exec" "export" {
  instance   = var.instance
  env        = var.env
  command    = ["sh", "-c", var.export]
  creates    = "/root/.${var.name}-exported"
  revert     = ["sh", "-c", "rm -rf /mnt/migrate-data/apps/${var.name} /mnt/migrate-data/apps/${var.name}.partial /mnt/migrate-data/apps/${var.name}.sync /root/.${var.name}-exported && { rmdir /mnt/migrate-data/apps 2>/dev/null || true; }"]
  timeout    = "1h"
  depends_on = [incus_sync.final]
}

step "helm_release" "app" {
  name       = var.name
  chart      = "charts/app"
  namespace  = "media"
  values     = var.values
  depends_on = [incus_exec.export]
}

# Run as soon as the release is up (not after the phase's other apps),
# asked four times a second: its first pass ends the app's measured
# downtime.
check "http_check" "health" {
  url        = var.health.url
  contains   = var.health.contains
  timeout    = "5m"
  interval   = "250ms"
  depends_on = [helm_release.app]
}
