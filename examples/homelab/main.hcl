# The migration of the brief: a home server's three Incus VMs (home
# services, Matrix, a k3s playground) replaced by one Talos Linux VM running
# Kubernetes, in the five phases it was done in. The old VMs are stopped,
# never deleted, and `migrate rollback` brings them back.
#
#   migrate plan --runbook examples/homelab
#   migrate run  --runbook examples/homelab --phase platform
#   ...
#   migrate rollback --runbook examples/homelab
#
# Secrets live beside the runbook, age-encrypted (secrets/*.age); patches
# and charts stay plain so that reviews can read them.

variable "node_ip" {
  type        = string
  default     = "10.0.0.50"
  description = "The Talos VM's address."
}

variable "zfs_data" {
  type        = string
  default     = "/tank/data"
  description = "The host's two-disk ZFS mirror: photos, files, recordings."
}

variable "igpu_pci" {
  type        = string
  default     = "0000:00:02.0"
  description = "The Intel iGPU, passed through for hardware video decoding."
}

variable "talos_iso" {
  type        = string
  default     = "/var/lib/images/talos-v1.13.3-i915.iso"
  description = "An Image Factory ISO with the same schematic as the provider's extensions."
}

variable "matrix_domain" {
  type    = string
  default = "matrix.example.org"
}

variable "synapse_registration_secret" {
  type        = string
  sensitive   = true
  description = "Synapse's registration shared secret: never shown, never stored in clear."
}

variable "matrix_vm" {
  type        = string
  default     = "matrix"
  description = "The old Incus VM running Synapse (Debian's matrix-synapse package, SQLite)."
}

variable "matrix_url" {
  type        = string
  default     = "https://matrix.example.org"
  description = "Where the homeserver answers from the internet once DNS points at the node."
}

variable "retain_old_vms_until" {
  type        = string
  default     = "2027-02-01"
  description = "The old VMs may be deleted after this date, not before."
}

provider "incus" "host" {} # the local socket of the IncusOS host

provider "talos" "node" {
  endpoints        = [var.node_ip]
  talosconfig      = "secrets/talosconfig.age"
  secrets          = "secrets/secrets.yaml.age"
  version          = "v1.13.3" # what the cluster runs: render with THIS version
  cluster_name     = "home"
  cluster_endpoint = "https://${var.node_ip}:6443"
  extensions       = ["siderolabs/i915"]
}

provider "helm" "cluster" {
  kubeconfig           = "secrets/kubeconfig" # written by talos_kubeconfig.admin
  default_pod_security = "baseline"           # what Talos enforces
}

phase "platform" {
  description = "One Talos VM: the data and the GPU first (what could disqualify Talos), then the whole machine in one file."

  step "incus_instance" "talos" {
    provider = incus.host
    type     = "virtual-machine"
    empty    = true
    cpu      = 6
    memory   = "24GiB"
    devices = {
      data    = { type = "disk", source = var.zfs_data, path = "/var/mnt/data" } # virtiofs tag incus_data
      bulk    = { type = "disk", pool = "default", source = "bulk" }             # the 150 GiB disk
      igpu    = { type = "gpu", gputype = "physical", pci = var.igpu_pci }
      install = { type = "disk", source = var.talos_iso, "boot.priority" = "10" }
    }
    start = true
  }

  step "talos_machine_config" "node" {
    provider    = talos.node
    patches     = ["patches/node.yaml"]
    try_timeout = "2m"
    rendered    = "rendered/controlplane.yaml"
    verify = {
      services = ["apid", "kubelet"]
    }
    depends_on = [incus_instance.talos]
  }

  step "talos_bootstrap" "etcd" {
    provider   = talos.node
    depends_on = [talos_machine_config.node]
  }

  step "talos_kubeconfig" "admin" {
    provider   = talos.node
    path       = "secrets/kubeconfig"
    depends_on = [talos_bootstrap.etcd]
  }

  check "talos_service_health" "control_plane" {
    provider = talos.node
    services = ["etcd", "kubelet", "apid"]
  }
}

phase "data-apps" {
  description = "Jellyfin and Frigate with the host's data and the iGPU: their namespace is privileged, in git, on purpose."

  step "kubernetes_namespace" "media" {
    provider     = helm.cluster
    kubeconfig   = talos_kubeconfig.admin.path
    pod_security = "privileged" # hostPath for the ZFS data, /dev/dri for the iGPU
  }

  step "helm_release" "jellyfin" {
    provider   = helm.cluster
    chart      = "charts/app"
    namespace  = "media"
    values     = { image = "jellyfin/jellyfin:10.10", port = 8096, gpu = true, hostData = { media = { path = "/var/mnt/data/media", mountPath = "/media" } } }
    depends_on = [kubernetes_namespace.media]
  }

  step "helm_release" "frigate" {
    provider   = helm.cluster
    chart      = "charts/app"
    namespace  = "media"
    values     = { image = "ghcr.io/blakeblackshear/frigate:0.14", port = 5000, gpu = true, hostData = { recordings = { path = "/var/mnt/data/frigate", mountPath = "/media/frigate" } } }
    depends_on = [kubernetes_namespace.media]
  }

  check "talos_read" "data_visible" {
    provider = talos.node
    path     = "/var/mnt/data/.probe"
    expect   = "ok"
  }
}

phase "host-services" {
  description = "What the old host did by hand: file shares, and the CI runner that borrowed the host's Docker socket."

  step "kubernetes_namespace" "files" {
    provider     = helm.cluster
    pod_security = "privileged" # Samba serves the ZFS data through hostPath
  }

  step "helm_release" "samba" {
    provider   = helm.cluster
    chart      = "charts/app"
    namespace  = "files"
    values     = { image = "ghcr.io/servercontainers/samba:latest", port = 445, hostData = { share = { path = "/var/mnt/data/files", mountPath = "/shares/files" } } }
    depends_on = [kubernetes_namespace.files]
  }

  step "kubernetes_namespace" "ci" {
    provider     = helm.cluster
    pod_security = "privileged" # the runner builds images: raised privileges, its own namespace
  }

  step "helm_release" "ci_runner" {
    provider   = helm.cluster
    chart      = "charts/app"
    namespace  = "ci"
    values     = { image = "gitea/act_runner:0.2", privileged = true }
    depends_on = [kubernetes_namespace.ci]
  }
}

phase "ingress-matrix" {
  description = "Internet traffic moves together with the Matrix homeserver and its data; the old Matrix VM is stopped, kept for the way back."

  # Synapse stops first: a database copied while it writes is not a copy.
  # Rollback starts it again (after the VM itself is started again).
  step "incus_exec" "stop_synapse" {
    provider = incus.host
    instance = var.matrix_vm
    command  = ["systemctl", "stop", "matrix-synapse"]
    revert   = ["systemctl", "start", "matrix-synapse"]
  }

  # A consistent copy of the database and the media store, once: after a
  # crash the marker says it is done, and it is not dumped a second time.
  step "incus_exec" "export_synapse" {
    provider = incus.host
    instance = var.matrix_vm
    command = ["sh", "-c", <<-EOT
      set -e
      mkdir -p /root/synapse-export
      sqlite3 /var/lib/matrix-synapse/homeserver.db ".backup /root/synapse-export/homeserver.db"
      tar -C /var/lib/matrix-synapse -cf /root/synapse-export/media.tar media
      touch /root/synapse-export/.done
    EOT
    ]
    creates    = "/root/synapse-export/.done"
    revert     = ["rm", "-rf", "/root/synapse-export"]
    depends_on = [incus_exec.stop_synapse]
  }

  # Onto the data share, which the Talos node mounts at /var/mnt/data:
  # a new directory, Synapse's data directory from now on.
  step "incus_file" "synapse_data" {
    provider    = incus.host
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/root/synapse-export"
    destination = "${var.zfs_data}/matrix"
    depends_on  = [incus_exec.export_synapse]
  }

  # The signing key is the homeserver's identity: it never lands in clear,
  # neither on disk (pulled straight into an age file) nor in the state.
  step "incus_file" "signing_key" {
    provider    = incus.host
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/etc/matrix-synapse/homeserver.signing.key"
    destination = "secrets/synapse-signing.key.age"
    depends_on  = [incus_exec.stop_synapse]
  }

  step "kubernetes_namespace" "matrix" {
    provider     = helm.cluster
    pod_security = "baseline"
  }

  step "kubernetes_secret" "signing_key" {
    provider   = helm.cluster
    namespace  = "matrix"
    name       = "synapse-signing-key"
    files      = { "homeserver.signing.key" = "secrets/synapse-signing.key.age" }
    depends_on = [kubernetes_namespace.matrix, incus_file.signing_key]
  }

  # Synapse's data lives on the data share: a volume the cluster binds to
  # the directory the export was pulled into.
  step "kubernetes_manifest" "synapse_storage" {
    provider     = helm.cluster
    namespace    = "matrix"
    files        = ["manifests/synapse-storage.yaml"]
    wait_for     = "Bound"
    wait_timeout = "2m"
    depends_on   = [kubernetes_namespace.matrix]
  }

  # The restore, once, inside the cluster: the database and media put
  # where the new Synapse expects them, owned by its user.
  step "kubernetes_job" "restore_synapse" {
    provider  = helm.cluster
    namespace = "matrix"
    name      = "synapse-restore"
    file      = "manifests/synapse-restore.yaml"
    timeout   = "30m"
    depends_on = [kubernetes_manifest.synapse_storage, incus_file.synapse_data]
  }

  step "helm_release" "synapse" {
    provider  = helm.cluster
    chart     = "charts/app"
    namespace = "matrix"
    wait      = true
    timeout   = "10m"
    values = {
      image       = "matrixdotorg/synapse:v1.120"
      port        = 8008
      env         = { SYNAPSE_SERVER_NAME = var.matrix_domain, SYNAPSE_CONFIG_DIR = "/data" }
      claims      = { data = { claim = "synapse-data", mountPath = "/data" } }
      secretFiles = { signing = { secret = "synapse-signing-key", mountPath = "/keys" } }
    }
    set_sensitive = { "env.SYNAPSE_REGISTRATION_SHARED_SECRET" = var.synapse_registration_secret }
    depends_on    = [kubernetes_job.restore_synapse, kubernetes_secret.signing_key]
  }

  step "kubernetes_manifest" "ingress" {
    provider   = helm.cluster
    namespace  = "matrix"
    objects = [{
      apiVersion = "networking.k8s.io/v1"
      kind       = "Ingress"
      metadata   = { name = "synapse" }
      spec = {
        rules = [{
          host = var.matrix_domain
          http = { paths = [{ path = "/", pathType = "Prefix", backend = { service = { name = "synapse", port = { number = 8008 } } } }] }
        }]
      }
    }]
    depends_on = [helm_release.synapse]
  }

  step "approval" "dns" {
    message    = "Point ${var.matrix_domain} and the home services' records at ${var.node_ip} at the registrar."
    depends_on = [kubernetes_manifest.ingress]
  }

  step "incus_instance_state" "old_matrix" {
    provider          = incus.host
    instance          = var.matrix_vm
    state             = "stopped"
    snapshot_before   = true
    keep_for_rollback = true
    depends_on        = [approval.dns, incus_file.synapse_data, incus_file.signing_key]
  }

  check "http_check" "federation" {
    url     = "${var.matrix_url}/_matrix/federation/v1/version"
    timeout = "5m"
  }
}

phase "cleanup" {
  description = "The old VMs are stopped, not deleted: a safeguard in case of a way back."

  step "incus_instance_state" "old_home" {
    provider        = incus.host
    instance        = "home-services"
    state           = "stopped"
    snapshot_before = true
  }

  step "incus_instance_state" "old_k3s" {
    provider        = incus.host
    instance        = "k3s"
    state           = "stopped"
    snapshot_before = true
  }

  # Deleting them is refused until retain_until has passed:
  #
  # step "incus_instance" "delete_old_home" {
  #   provider     = incus.host
  #   name         = "home-services"
  #   ensure       = "absent"
  #   retain_until = var.retain_old_vms_until
  # }
}
