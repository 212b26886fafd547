# A runbook using most of the language in one file.
variable "node_ip" {
  type        = string
  default     = "10.0.0.50"
  description = "Where the new node listens."
  validation {
    condition     = can(regex("^10\\.", var.node_ip))
    error_message = "The node must be on the 10.0.0.0/8 network."
  }
  validation {
    condition     = length(var.node_ip) > 6
    error_message = "Too short."
  }
}

variable "apps" {
  type    = list(string)
  default = ["jellyfin", "immich"]
}

variable "token" {
  type      = string
  default   = "not-a-real-token"
  sensitive = true
}

variable "settings" {
  type = object({
    replicas = optional(number, 1)
    name     = string
  })
  default = { name = "media" }
}

locals {
  url = "http://${var.node_ip}:8096"
}

locals {
  health   = "${local.url}/health"
  app_list = join(",", [for a in var.apps : upper(a)])
  values   = yamlencode({ replicas = var.settings.replicas, apps = var.apps })
}

provider "talos" "node" {
  version   = "v1.13.3"
  endpoints = [var.node_ip]
  token     = var.token
}

phase "prepare" {
  description = "Check that the old host answers."

  check "http_check" "old-up" {
    url    = local.health
    status = 200
    when   = "before"
  }

  step "exec" "backup" {
    command = ["sh", "-c", "tar czf /tmp/backup.tgz /srv"]
    creates = "/tmp/backup.tgz"
    env     = { APPS = local.app_list, VALUES = local.values }
    timeout = "10m"
    retry {
      attempts = 3
      backoff  = "2s"
    }
  }

  step "approval" "go" {
    message    = "Backup done (exit ${exec.backup.exit_code}); switch over?"
    depends_on = [exec.backup]
  }
}

phase "platform" {
  step "talos_kubeconfig" "main" {
    provider = talos.node
    out      = "kubeconfig"
  }

  check "talos_read" "probe" {
    path   = "/var/mnt/data/.probe"
    expect = "ok"
  }

  check "http_check" "api" {
    url     = "https://${var.node_ip}:6443/readyz"
    timeout = "2m"
    headers = { Authorization = "Bearer ${var.token}" }
  }
}

phase "apps" {
  after = [phase.platform, phase.prepare]

  step "exec" "deploy" {
    command = concat(["kubectl", "--kubeconfig", talos_kubeconfig.main.path, "apply"], formatlist("-f=%s.yaml", var.apps))
    revert  = ["kubectl", "--kubeconfig", talos_kubeconfig.main.path, "delete", "-f", "."]
  }

  step "wait" "settle" {
    duration   = "30s"
    depends_on = [step.exec.deploy]
  }

  check "http_check" "jellyfin" {
    url      = local.url
    interval = "5s"
  }
}
