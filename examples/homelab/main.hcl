# The migration of the brief: a home server's three Incus VMs (services:
# Samba, Jellyfin, Frigate; matrix: Synapse; k3s: a playground) replaced
# by one Talos Linux VM running Kubernetes: a rehearsal on a throwaway VM,
# then the five phases of the move. The old VMs are stopped, never
# deleted, and `migrate rollback` brings them back.
#
#   export MIGRATE_AGE_IDENTITY=secrets/demo-identity.txt   # the DEMO identity
#   migrate plan --runbook examples/homelab
#   migrate run  --runbook examples/homelab --phase rehearsal
#
# Secrets are age-encrypted (secrets/*.age, secrets.auto.hcl.age); patches,
# charts, manifests and scripts stay plain for review. The host is an
# IncusOS server reached as the incus CLI does, through a remote:
#
#   incus remote add incusos https://192.168.1.10:8443 --token TOKEN

variable "hostname" {
  type        = string
  default     = "talos-home"
  description = "The Talos node's hostname, set by the HostnameConfig of patches/node.yaml (and the name of its Kubernetes node)."
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.hostname))
    error_message = "The hostname must be a DNS label: lower-case letters, digits and dashes."
  }
  validation {
    condition     = can(regex("(?m)^hostname: ${var.hostname}$", file("patches/node.yaml")))
    error_message = "The HostnameConfig of patches/node.yaml names another hostname: set the same name there and in var.hostname."
  }
}

variable "incus_remote" {
  type        = string
  default     = "incusos"
  description = "The IncusOS host, as a remote of the incus CLI (incus remote add; its client certificate and the server's pinned one come from the CLI's configuration, INCUS_CONF or ~/.config/incus)."
}

variable "storage_pool" {
  type        = string
  default     = "local"
  description = "The host's pool for the VMs' disks and the ISO: IncusOS's own ZFS pool is called local."
}

variable "data_pool" {
  type        = string
  default     = "tank"
  description = "The pool on the host's two-disk ZFS mirror, holding the data volume."
}

variable "data_volume" {
  type        = string
  default     = "data"
  description = "The custom filesystem volume of data_pool with the photos, files and recordings (and, after the move, Synapse's data): shared into the VM by virtiofs (tag incus_data), mounted by Talos at /var/mnt/data. It never leaves the host."
}

variable "lan_bridge" {
  type        = string
  default     = "enp5s0"
  description = "The host's bridge to the LAN (IncusOS makes one of each interface, named after it: incus network list shows it). The node must be on the LAN: Talos' API, Kubernetes, Samba, the NodePorts and the router's forwards reach it there; incusbr0 is NAT."
}

variable "lan_network" {
  type        = string
  default     = ""
  description = "A managed network of type physical on the LAN, when the host has one: IncusOS's direct-attach tutorial gives the LAN interface the instances role (a bridge of the host's own appears) and makes a managed physical network on it, and the NICs then name that network (Incus refuses nictype and parent beside network). Empty: the NICs are bridged onto lan_bridge."
}

locals {
  # The NIC's way onto the LAN (without its MAC).
  lan_nic = var.lan_network != "" ? tomap({ type = "nic", network = var.lan_network }) : tomap({ type = "nic", nictype = "bridged", parent = var.lan_bridge })
  # The Talos system disk by its serial (incus_<device>), never /dev/sdX.
  system_disk = "disk.serial == \"incus_root\""
  # What groups/talos-node needs of the host.
  host = { storage_pool = var.storage_pool, data_pool = var.data_pool, data_volume = var.data_volume, igpu_pci = var.igpu_pci, lan_nic = local.lan_nic }
}

variable "node_mac" {
  type        = string
  default     = "10:66:6a:4d:16:50"
  description = "The fixed MAC of the Talos VM's NIC on the LAN: the router reserves node_address for it."
}

variable "node_address" {
  type        = string
  default     = "192.168.1.50"
  description = "The address the router's DHCP reserves for node_mac. Incus cannot see it (Talos runs no Incus agent): migrate reaches the node here over its authenticated API; the first config goes through the Incus host (the VM's config drive), not to this address."
}

variable "rehearsal_mac" {
  type        = string
  default     = "10:66:6a:4d:16:51"
  description = "The fixed MAC of the rehearsal VM's NIC on the LAN."
}

variable "rehearsal_address" {
  type        = string
  default     = "192.168.1.51"
  description = "The address the router reserves for rehearsal_mac."
}

variable "talos_version" {
  type        = string
  default     = "v1.13.3"
  description = "The Talos release the cluster runs (1.13, 1.14 or 1.15): the providers render its configs, talos_image fetches its ISO. The patches must be in that release's form: from v1.14 cluster.allowSchedulingOnControlPlanes is a KubeNodeConfig document (the plan shows the rewrite; migrate patches upgrade --to VERSION --write writes it)."
  validation {
    condition     = can(regex("^v1\\.1[345]\\.[0-9]+(-(alpha|beta|rc)\\.[0-9]+)?$", var.talos_version))
    error_message = "talos_version must be a Talos 1.13, 1.14 or 1.15 release such as \"v1.13.3\", \"v1.14.7\" or \"v1.15.0-beta.0\"."
  }
}

variable "node_cpu" {
  type        = number
  default     = 6
  description = "The Talos VM's cores; with node_memory, what the plan judges the pods' requests against before the cluster exists."
}

variable "node_memory" {
  type        = string
  default     = "24GiB"
  description = "The Talos VM's memory."
}

variable "rehearsal_cpu" {
  type    = number
  default = 2
}

variable "rehearsal_memory" {
  type    = string
  default = "4GiB"
}

variable "igpu_pci" {
  type        = string
  default     = "0000:00:02.0"
  description = "The Intel iGPU, passed through for hardware video decoding."
}

variable "image_factory" {
  type        = string
  default     = "https://factory.talos.dev"
  description = "The Image Factory the talos providers register their schematic with and talos_image.talos downloads the ISO from."
}

variable "talos_iso_dir" {
  type        = string
  default     = ""
  description = "Where talos_image.talos keeps the ISO it downloads, on the machine running migrate; empty: the user's cache directory, outside the runbook."
}

variable "services_vm" {
  type        = string
  default     = "services"
  description = "The old Incus VM of the home services: Samba, Jellyfin (Debian's jellyfin package: /var/lib/jellyfin, /etc/jellyfin), Frigate (Docker Compose in /opt/frigate, its /config in /opt/frigate/config)."
}

variable "matrix_vm" {
  type        = string
  default     = "matrix"
  description = "The old Incus VM running Synapse (Debian's matrix-synapse package, SQLite)."
}

variable "k3s_vm" {
  type        = string
  default     = "k3s"
  description = "The old Incus VM of the k3s playground."
}

# The applications as the old VMs run them (migrate init reads them):
# not_older refuses an image older than what ran there, at plan.
variable "jellyfin_version" {
  type        = string
  default     = ""
  description = "The Jellyfin the old services VM runs (dpkg-query: jellyfin-server, e.g. 10.10.7+deb12); empty: not read, no floor."
}

variable "jellyfin_image" {
  type        = string
  default     = "jellyfin/jellyfin:10.10.3"
  description = "Jellyfin's image on the node: of jellyfin_version or newer."
}

variable "jellyfin_hwaccel" {
  type        = string
  default     = "none"
  description = "The hardware decoding the old Jellyfin was set for (encoding.xml's HardwareAccelerationType: none, vaapi, qsv)."
}

variable "jellyfin_library_paths" {
  type        = list(string)
  default     = []
  description = "The paths Jellyfin's libraries name (root/default/*/options.xml), as the old VM has them."
}

variable "frigate_version" {
  type        = string
  default     = ""
  description = "The Frigate the old services VM runs (its Compose project's image tag, e.g. 0.14.1); empty: not read, no floor."
}

variable "frigate_image" {
  type        = string
  default     = "ghcr.io/blakeblackshear/frigate:0.14.1"
  description = "Frigate's image on the node: of frigate_version or newer."
}

variable "frigate_install" {
  type        = string
  default     = "compose"
  description = "How Frigate runs in the old VM: compose (a Docker Compose project, stopped by docker compose) or service (a frigate.service unit)."
}

variable "frigate_hwaccel" {
  type        = string
  default     = ""
  description = "The hwaccel_args of the old Frigate's config.yml (preset-vaapi, ...); empty: decoding on the CPU."
}

variable "synapse_version" {
  type        = string
  default     = ""
  description = "The Synapse the old matrix VM runs (dpkg-query: matrix-synapse-py3, e.g. 1.120.2+bookworm1); empty: not read, no floor."
}

variable "synapse_image" {
  type        = string
  default     = "matrixdotorg/synapse:v1.120"
  description = "Synapse's image on the node: of synapse_version or newer (Synapse refuses a database schema newer than its own)."
}

variable "synapse_database" {
  type        = string
  default     = "sqlite3"
  description = "The database engine of the old Synapse (its database.name): sqlite3 or psycopg2 (PostgreSQL)."
}

variable "samba_users" {
  type        = list(string)
  default     = []
  description = "The old Samba's accounts (pdbedit -L), names only."
}

variable "samba_check_user" {
  type        = string
  default     = ""
  description = "A moved Samba account host-services' smb_check logs in as, proving its old password works on the new Samba; \"\" lists the shares as a guest."
}

variable "samba_check_password" {
  type        = string
  default     = ""
  sensitive   = true
  description = "That account's password (in secrets.auto.hcl.age: migrate secrets edit). Never shown, never stored in clear."
}

variable "samba_check_share" {
  type        = string
  default     = ""
  description = "A share samba_check_user opens and reads the top of (one guests may not open, such as media, proves the account); \"\" opens none."
}

variable "old_data_path" {
  type        = string
  default     = "/var/mnt/data"
  description = "Where the old services VM sees the data volume: Jellyfin's libraries are under it, and the new pod mounts the volume's directories at the same paths, so the paths in Jellyfin's database stay true."
}

variable "hwaccel" {
  type        = bool
  default     = true
  description = "The new node has the iGPU's render node (/dev/dri/renderD128, which the rehearsal proves): the moved Jellyfin and Frigate settings switch hardware decoding on (VA-API). false: they decode as the old VM did."
}

locals {
  # What the moved settings decode with: the old VM's GPU setting, else VA-API.
  jellyfin_hwaccel = !var.hwaccel ? var.jellyfin_hwaccel : contains(["vaapi", "qsv"], var.jellyfin_hwaccel) ? var.jellyfin_hwaccel : "vaapi"
  frigate_hwaccel  = !var.hwaccel ? var.frigate_hwaccel : var.frigate_hwaccel != "" ? var.frigate_hwaccel : "preset-vaapi"
  # Jellyfin's libraries as init read them, else the volume's media.
  jellyfin_libraries = length(var.jellyfin_library_paths) > 0 ? var.jellyfin_library_paths : ["${var.old_data_path}/media"]
}

variable "matrix_domain" {
  type        = string
  default     = "matrix.example.org"
  description = "The homeserver's public name: the Ingress's host, and where its .well-known delegates federation to (port 443: the router forwards no 8448)."
}

variable "matrix_url" {
  type        = string
  default     = "https://matrix.example.org"
  description = "Where the homeserver answers from the internet once DNS points at the home: https://, its certificate verified."
  validation {
    condition     = startswith(var.matrix_url, "https://")
    error_message = "Federation is served over TLS: matrix_url must be an https:// URL."
  }
}

variable "matrix_ca" {
  type        = string
  default     = ""
  description = "A PEM file of the CA that issued the homeserver's certificate, for the federation checks; empty: the system's CAs (a certificate of a public CA, such as Let's Encrypt's)."
}

variable "matrix_tls_cert" {
  type        = string
  default     = "secrets/matrix-tls.crt.age"
  description = "The certificate (with its chain) the ingress serves for matrix_domain, e.g. from your ACME client, age-encrypted (migrate secrets encrypt): the Secret synapse-tls."
}

variable "matrix_tls_key" {
  type        = string
  default     = "secrets/matrix-tls.key.age"
  description = "The certificate's private key, age-encrypted: it never lies in clear beside the runbook, and is redacted everywhere."
}

variable "federation_wait" {
  type        = string
  default     = "5m"
  description = "How long the federation check waits for the homeserver to answer from the internet (DNS and the router's forwards take effect)."
}

variable "forge_url" {
  type        = string
  default     = "https://git.example.org"
  description = "The Gitea/Forgejo instance the CI runner registers with."
}

variable "synapse_registration_secret" {
  type        = string
  sensitive   = true
  description = "Synapse's registration shared secret on the new homeserver (from secrets.auto.hcl.age; register_new_matrix_user signs with it): kept in the Secret synapse-config beside homeserver.yaml, which reads it from there (registration_shared_secret_path). Never shown, never stored in clear."
}

variable "retain_old_vms_until" {
  type        = string
  default     = "2027-02-01"
  description = "The old VMs may be deleted after this date, not before."
}

# Talos has two provider blocks (the rehearsal's node and the real one):
# each talos_* step says which. incus and helm have one each.
provider "incus" "host" {
  remote = var.incus_remote # HTTPS, with the incus CLI's client certificate
}

# The rehearsal's throwaway node: the same secrets as the real one.
provider "talos" "rehearsal" {
  endpoints        = [var.rehearsal_address]
  talosconfig      = "secrets/talosconfig.age"
  secrets          = "secrets/secrets.yaml.age"
  version          = var.talos_version
  cluster_name     = "rehearsal"
  cluster_endpoint = "https://${var.rehearsal_address}:6443"
  extensions       = ["siderolabs/i915"] # the iGPU firmware: what the rehearsal tests
  image_factory    = var.image_factory

  install_disk_selector = local.system_disk # the VM's root device, never /dev/sdX
}

provider "talos" "node" {
  endpoints        = [var.node_address]
  talosconfig      = "secrets/talosconfig.age"
  secrets          = "secrets/secrets.yaml.age"
  version          = var.talos_version # render with THIS version, never the client's
  cluster_name     = "home"
  cluster_endpoint = "https://${var.node_address}:6443"
  extensions       = ["siderolabs/i915"]
  image_factory    = var.image_factory

  install_disk_selector = local.system_disk
}

provider "helm" "cluster" {
  kubeconfig           = "secrets/kubeconfig.age" # written by talos_kubeconfig.admin
  default_pod_security = "baseline"               # what Talos enforces
}

phase "rehearsal" {
  description = "The disqualifying tests on a throwaway Talos VM: a pod writes to the data share and the node reads it back; the iGPU's render node exists and a pod opens it. Nothing real is touched before this passes."

  # The ISO of the node's version and schematic, from the Image Factory.
  step "talos_image" "talos" {
    provider = talos.node
    platform = "nocloud"
    path     = var.talos_iso_dir == "" ? null : "${var.talos_iso_dir}/talos-${var.talos_version}-i915.iso"
  }

  step "incus_volume" "talos_iso" {
    pool        = var.storage_pool
    name        = "talos-${replace(var.talos_version, ".", "-")}-i915"
    source_file = talos_image.talos.path
  }

  group "rehearsal" {
    source     = "./groups/talos-node"
    providers  = { talos = talos.rehearsal }
    vm         = "rehearsal"
    patch      = "patches/rehearsal.yaml"
    services   = ["apid"]
    cpu        = var.rehearsal_cpu
    memory     = var.rehearsal_memory
    root_size  = "16GiB"
    mac        = var.rehearsal_mac
    iso        = { pool = incus_volume.talos_iso.pool, name = incus_volume.talos_iso.name }
    host       = local.host
    kubeconfig = "secrets/rehearsal.kubeconfig.age"
  }

  step "kubernetes_namespace" "rehearsal_media" {
    kubeconfig   = group.rehearsal.kubeconfig
    name         = "media"
    pod_security = "privileged" # as the real media namespace: hostPath
    depends_on   = [group.rehearsal.kubernetes_ready.node]
  }

  # The data test: a pod writes on the share, the node reads it back.
  step "kubernetes_job" "rehearsal_write" {
    kubeconfig = group.rehearsal.kubeconfig
    namespace  = "media"
    name       = "data-share-write"
    timeout    = "10m"
    job = {
      template = { spec = {
        restartPolicy = "Never"
        containers = [{
          name         = "write"
          image        = "busybox:1.36"
          command      = ["sh", "-c", "mkdir -p /data/.migrate && echo 'written by a pod of the rehearsal' > /data/.migrate/rehearsal"]
          volumeMounts = [{ name = "data", mountPath = "/data" }]
        }]
        volumes = [{ name = "data", hostPath = { path = "/var/mnt/data", type = "Directory" } }]
      } }
    }
    depends_on = [kubernetes_namespace.rehearsal_media]
  }
  # The data volume's copy rate, as a pod of the rehearsal node writes it:
  # the plan's estimates of the services' downtime read it (its facts).
  step "kubernetes_job" "rehearsal_copy_rate" {
    kubeconfig = group.rehearsal.kubeconfig
    namespace  = "media"
    name       = "data-share-copy-rate"
    timeout    = "10m"
    job = {
      template = { spec = {
        restartPolicy = "Never"
        containers = [{
          name         = "copy"
          image        = "busybox:1.36"
          command      = ["sh", "-c", file("scripts/copy-rate.sh")]
          volumeMounts = [{ name = "data", mountPath = "/data" }]
        }]
        volumes = [{ name = "data", hostPath = { path = "/var/mnt/data", type = "Directory" } }]
      } }
    }
    depends_on = [kubernetes_job.rehearsal_write]
  }


  step "talos_read" "rehearsal_data" {
    provider      = talos.rehearsal
    path          = "/var/mnt/data/.migrate/rehearsal"
    expect        = "written by a pod of the rehearsal"
    error_message = "The data share is not shared between the pods and the node: check the VM's data device (virtiofs, tag incus_data) and the ExternalVolumeConfig of patches/rehearsal.yaml."
    depends_on    = [kubernetes_job.rehearsal_write]
  }

  # The GPU test: i915 made the render node, and a privileged pod opens it.
  step "talos_read" "rehearsal_igpu" {
    provider      = talos.rehearsal
    path          = "/sys/class/drm/renderD128/dev"
    expect        = "226:128"
    error_message = "No render node (/dev/dri/renderD128) on the rehearsal node: the i915 driver did not bind an Intel GPU. Does the VM have the gpu device (pci ${var.igpu_pci}), and does the schematic carry siderolabs/i915? Without it Jellyfin and Frigate decode video on the CPU, as they did on the old VM all along."
    depends_on    = [group.rehearsal.talos_service_health.installed]
  }

  step "kubernetes_job" "rehearsal_render" {
    kubeconfig = group.rehearsal.kubeconfig
    namespace  = "media"
    name       = "render-node-open"
    timeout    = "10m"
    job = {
      template = { spec = {
        restartPolicy = "Never"
        containers = [{
          name            = "open"
          image           = "busybox:1.36"
          command         = ["sh", "-c", "test -c /dev/dri/renderD128 && exec 3<>/dev/dri/renderD128 && echo 'opened /dev/dri/renderD128'"]
          securityContext = { privileged = true }
          volumeMounts    = [{ name = "dri", mountPath = "/dev/dri" }]
        }]
        volumes = [{ name = "dri", hostPath = { path = "/dev/dri", type = "Directory" } }]
      } }
    }
    depends_on = [kubernetes_namespace.rehearsal_media, talos_read.rehearsal_igpu]
  }

  # Both passed: the throwaway VM goes (for good), and with it what was
  # made inside it, which a rollback then has nothing to undo for.
  step "incus_instance" "rehearsal_deleted" {
    name       = "rehearsal"
    ensure     = "absent"
    depends_on = [talos_read.rehearsal_data, talos_read.rehearsal_igpu, kubernetes_job.rehearsal_render, kubernetes_job.rehearsal_copy_rate, group.rehearsal.incus_device.config_cleared]
    discards = [
      group.rehearsal.incus_instance.vm, group.rehearsal.talos_machine_config.config, group.rehearsal.incus_device.config_cleared, group.rehearsal.talos_bootstrap.etcd,
      kubernetes_namespace.rehearsal_media, kubernetes_job.rehearsal_write, kubernetes_job.rehearsal_copy_rate, kubernetes_job.rehearsal_render,
    ]
  }
}

phase "platform" {
  description = "One Talos VM (the data share, the bulk disk, the iGPU, booted from the ISO volume); the whole machine in one file: first install, bootstrap, kubeconfig."

  # The big disk, which patches/node.yaml selects by its size.
  step "incus_volume" "bulk" {
    pool         = var.storage_pool
    size         = "150GiB"
    content_type = "block"
  }

  # Later changes of the patch: dry-run diff, TRY, verify, then no-reboot.
  group "node" {
    source      = "./groups/talos-node"
    providers   = { talos = talos.node }
    vm          = "talos"
    patch       = "patches/node.yaml"
    services    = ["apid", "machined"]
    try_timeout = "2m"
    rendered    = "rendered/controlplane.yaml"
    cpu         = var.node_cpu
    memory      = var.node_memory
    root_size   = "64GiB"
    mac         = var.node_mac
    iso         = { pool = incus_volume.talos_iso.pool, name = incus_volume.talos_iso.name }
    devices     = { bulk = { type = "disk", pool = incus_volume.bulk.pool, source = incus_volume.bulk.name } }
    host        = local.host
    kubeconfig  = "secrets/kubeconfig.age"
    node        = var.hostname
  }

  # Installed: the VM never boots the ISO again (rollback attaches it).
  step "incus_device" "talos_iso_detached" {
    instance   = group.node.vm
    name       = "install"
    ensure     = "absent"
    depends_on = [group.node.incus_device.config_cleared] # one change of the instance at a time
  }

  check "talos_service_health" "control_plane" {
    provider = talos.node
    services = ["etcd", "kubelet", "apid"]
  }
}

phase "data-apps" {
  description = "Jellyfin and Frigate with the host's data, the iGPU, and their configuration and databases moved from the old services VM onto the data share, on fixed NodePorts of the LAN: their namespace is privileged, in git, on purpose."

  # The data volume, attached to the old VM for the exports (old VM to
  # volume, never through this machine). Rollback detaches it.
  step "incus_device" "services_data" {
    instance = var.services_vm
    name     = "migrate-data"
    device   = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/mnt/migrate-data" }
  }

  step "kubernetes_namespace" "media" {
    pod_security = "privileged" # hostPath for the ZFS data and the bulk disk, /dev/dri for the iGPU
  }

  # /var/lib/jellyfin and /etc/jellyfin into apps/jellyfin as the image's
  # /config, its paths and hardware decoding rewritten; it stops first if
  # a library is not under a path the pod mounts.
  group "jellyfin" {
    source     = "./groups/app"
    depends_on = [incus_device.services_data, kubernetes_namespace.media]
    name       = "jellyfin"
    instance   = var.services_vm
    data = { # Debian's jellyfin package; its SQLite databases once it is stopped
      lib    = { source = "/var/lib/jellyfin", critical = ["*.db", "*.db-wal", "*.db-shm"] }
      config = { source = "/etc/jellyfin" }
    }
    stop       = ["systemctl", "stop", "jellyfin"]
    start      = ["systemctl", "start", "jellyfin"]
    export     = file("scripts/jellyfin-export.sh")
    env        = { LIBRARIES = join("\n", local.jellyfin_libraries), OLD_DATA = var.old_data_path, HWACCEL = local.jellyfin_hwaccel }
    health     = { url = "http://${var.node_address}:30096/health", contains = "Healthy" }
    values = {
      image      = not_older(var.jellyfin_image, var.jellyfin_version)
      port       = 8096
      nodePort   = 30096 # http://NODE:30096 on the LAN
      gpu        = true
      privileged = true # /dev/dri from a hostPath is usable only by a privileged container (no device plugin)
      # Each library where the old VM had it (its database's paths hold).
      hostData = merge({
        config = { path = "/var/mnt/data/apps/jellyfin", mountPath = "/config", type = "Directory" }
        cache  = { path = "/var/mnt/bulk/jellyfin/cache", mountPath = "/cache", type = "DirectoryOrCreate" }
        }, { for i, p in local.jellyfin_libraries : "library-${i}" => {
          path = "/var/mnt/data${trimprefix(p, var.old_data_path)}", mountPath = p, readOnly = true
      } })
      probe     = { http = "/health" }
      resources = { requests = { cpu = "500m", memory = "1Gi" }, limits = { memory = "4Gi" } }
    }
  }

  # Frigate's /config (config.yml, frigate.db) into apps/frigate; the
  # recordings are on the share already (or it stops first). Its
  # documented install is the Docker Compose project "frigate".
  group "frigate" {
    source     = "./groups/app"
    depends_on = [incus_device.services_data, kubernetes_namespace.media]
    name       = "frigate"
    instance   = var.services_vm
    data       = { config = { source = "/opt/frigate/config", critical = ["*.db", "*.db-wal", "*.db-shm"] } }
    stop       = var.frigate_install == "compose" ? ["docker", "compose", "-p", "frigate", "stop"] : ["systemctl", "stop", "frigate"]
    start      = var.frigate_install == "compose" ? ["docker", "compose", "-p", "frigate", "start"] : ["systemctl", "start", "frigate"]
    export     = file("scripts/frigate-export.sh")
    env        = { OLD_DATA = var.old_data_path, HWACCEL = local.frigate_hwaccel }
    health     = { url = "http://${var.node_address}:30500/api/version" }
    values = {
      image = not_older(var.frigate_image, var.frigate_version)
      ports = [
        { name = "http", port = 5000, nodePort = 30500 }, # the UI and API
        { name = "rtsp", port = 8554, nodePort = 30554 }, # restreams for the cameras' viewers
      ]
      gpu        = true
      privileged = true
      shmSize    = "512Mi"
      env        = { LIBVA_DRIVER_NAME = "iHD" } # VA-API on the iGPU
      hostData = {
        recordings = { path = "/var/mnt/data/frigate", mountPath = "/media/frigate" }
        config     = { path = "/var/mnt/data/apps/frigate", mountPath = "/config", type = "Directory" } # the export's
      }
      probe     = { http = "/api/version" }
      resources = { requests = { cpu = "1", memory = "1Gi" }, limits = { memory = "4Gi" } }
    }
  }

  # A pod of the namespace writes on the share; the node must see it.
  step "kubernetes_job" "data_probe" {
    namespace = "media"
    name      = "data-share-probe"
    timeout   = "10m"
    job = {
      template = { spec = {
        restartPolicy = "Never"
        containers = [{
          name         = "probe"
          image        = "busybox:1.36"
          command      = ["sh", "-c", "mkdir -p /data/.migrate && echo 'written by a pod of media' > /data/.migrate/data-apps"]
          volumeMounts = [{ name = "data", mountPath = "/data" }]
        }]
        volumes = [{ name = "data", hostPath = { path = "/var/mnt/data", type = "Directory" } }]
      } }
    }
    depends_on = [kubernetes_namespace.media]
  }

  check "talos_read" "data_visible" {
    provider      = talos.node
    path          = "/var/mnt/data/.migrate/data-apps"
    expect        = "written by a pod of media"
    error_message = "What a pod of media wrote on the data share is not on the node: Jellyfin and Frigate would not see the host's data."
  }
}

phase "host-services" {
  description = "What the old host did by hand: file shares, and the CI runner that borrowed the host's Docker socket."

  step "kubernetes_namespace" "files" {
    pod_security = "privileged" # Samba serves the ZFS data through hostPath, on the node's port 445
  }

  # Two Samba servers would lock the files apart.
  step "incus_exec" "stop_samba" {
    instance = var.services_vm
    command  = ["systemctl", "stop", "smbd"]
    revert   = ["systemctl", "start", "smbd"]
  }

  # The accounts with their NT hashes (pdbedit -L -w), 0600 in the old VM,
  # pulled straight into an age file; only the names are printed.
  step "incus_exec" "samba_users" {
    instance = var.services_vm
    env      = { EXPECTED = join(" ", var.samba_users) }
    command = ["sh", "-c", file("scripts/samba-users.sh")]
    creates    = "/root/migrate/smbpasswd"
    revert     = ["rm", "-f", "/root/migrate/smbpasswd", "/root/migrate/smbpasswd.partial"]
    depends_on = [incus_exec.stop_samba]
  }

  step "incus_file" "samba_users" {
    instance    = var.services_vm
    direction   = "pull"
    source      = "/root/migrate/smbpasswd"
    destination = "secrets/samba-users.age"
    depends_on  = [incus_exec.samba_users]
  }

  step "kubernetes_secret" "samba_users" {
    namespace  = "files"
    name       = "samba-users"
    files      = { smbpasswd = "secrets/samba-users.age" }
    depends_on = [kubernetes_namespace.files, incus_file.samba_users]
  }

  # Port 445 on the node's network; the image imports the old accounts
  # (ACCOUNT_name, UID_name) from the smbpasswd lines.
  step "helm_release" "samba" {
    chart     = "charts/app"
    namespace = "files"
    values = {
      image       = "ghcr.io/servercontainers/samba:smbd-only-a3.21.0-s4.20.6-r0"
      command = ["/bin/sh", "-c", file("scripts/samba-entrypoint.sh")]
      secretFiles = { users = { secret = "samba-users", mountPath = "/users" } }
      hostNetwork = true
      ports       = [{ name = "smb", port = 445 }]
      env = {
        SAMBA_CONF_LOG_LEVEL       = "1"
        SAMBA_VOLUME_CONFIG_files  = "[files]; path=/shares/files; browseable = yes; read only = no"
        SAMBA_VOLUME_CONFIG_photos = "[photos]; path=/shares/photos; browseable = yes; read only = yes"
        # The old Samba's media share, for its accounts only.
        SAMBA_VOLUME_CONFIG_media = join("; ", concat(["[media]", "path=/shares/media", "browseable = yes", "read only = no"],
        length(var.samba_users) > 0 ? ["valid users = ${join(" ", var.samba_users)}"] : []))
      }
      hostData = {
        files  = { path = "/var/mnt/data/files", mountPath = "/shares/files" }
        photos = { path = "/var/mnt/data/photos", mountPath = "/shares/photos", readOnly = true }
        media  = { path = "/var/mnt/data/media", mountPath = "/shares/media" }
      }
      probe     = { tcp = true }
      resources = { requests = { cpu = "100m", memory = "128Mi" }, limits = { memory = "512Mi" } }
    }
    depends_on = [kubernetes_namespace.files, kubernetes_secret.samba_users, incus_exec.stop_samba]
  }

  step "kubernetes_namespace" "ci" {
    pod_security = "privileged" # the runner builds images: raised privileges, its own namespace
  }

  step "kubernetes_secret" "ci_runner_token" {
    namespace  = "ci"
    name       = "ci-runner-token"
    files      = { token = "secrets/ci-runner-token.age" }
    depends_on = [kubernetes_namespace.ci]
  }

  step "helm_release" "ci_runner" {
    name      = "ci-runner" # a release name is a DNS label: no underscore
    chart     = "charts/app"
    namespace = "ci"
    values = {
      image      = "gitea/act_runner:0.2.11-dind"
      ports      = [{ name = "cache", port = 8088 }] # the runner's cache server for the jobs' containers
      privileged = true                             # its own Docker daemon builds images in the pod: no host socket any more
      env = {
        GITEA_INSTANCE_URL = var.forge_url
        GITEA_RUNNER_NAME  = "home-cluster"
      }
      secretEnv = { GITEA_RUNNER_REGISTRATION_TOKEN = { secret = "ci-runner-token", key = "token" } }
      hostData  = { data = { path = "/var/mnt/bulk/ci-runner", mountPath = "/data", type = "DirectoryOrCreate" } }
      resources = { requests = { cpu = "500m", memory = "1Gi" }, limits = { memory = "6Gi" } }
    }
    depends_on = [kubernetes_secret.ci_runner_token]
  }

  # The shares as an SMB client on the LAN lists them; given an account,
  # logged in with its old password.
  check "smb_check" "samba_shares" {
    address  = var.node_address
    shares   = ["files", "media", "photos"]
    user     = var.samba_check_user
    password = var.samba_check_password
    share    = var.samba_check_share
    timeout  = "5m"
  }
}

phase "ingress-matrix" {
  description = "Internet traffic moves together with the Matrix homeserver and its data; the old Matrix VM is stopped, kept for the way back."

  # On PostgreSQL, Synapse starts again (rollback) once its database
  # accepts connections.
  step "incus_exec" "stop_synapse" {
    instance = var.matrix_vm
    command  = ["systemctl", "stop", "matrix-synapse"]
    revert = var.synapse_database != "psycopg2" ? ["systemctl", "start", "matrix-synapse"] : ["sh", "-c", file("scripts/synapse-start.sh")]
  }

  step "incus_device" "matrix_data" {
    instance   = var.matrix_vm
    name       = "migrate-data"
    device     = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/mnt/migrate-data" }
    depends_on = [incus_exec.stop_synapse]
  }

  # homeserver.yaml and conf.d/ merged, then rewritten for the pod
  # (database, media, keys, registration secret from the Secret, .well-known),
  # 0600, never printed; it fails on an old path left.
  step "incus_exec" "synapse_config" {
    instance = var.matrix_vm
    env      = { DATABASE = var.synapse_database }
    command = ["sh", "-c", file("scripts/synapse-config.sh")]
    creates    = "/root/migrate/homeserver.yaml"
    revert     = ["rm", "-rf", "/root/migrate"]
    depends_on = [incus_exec.stop_synapse]
  }

  # The database (SQLite backup or pg_dump) and the media store, once, into
  # matrix/ of the data volume: made aside, renamed when whole.
  step "incus_exec" "export_synapse" {
    instance = var.matrix_vm
    env      = { DATABASE = var.synapse_database }
    command = ["sh", "-c", file("scripts/synapse-export.sh")]
    creates    = "/root/.synapse-exported"
    revert     = ["rm", "-rf", "/mnt/migrate-data/matrix", "/mnt/migrate-data/matrix.partial", "/mnt/migrate-data/matrix-postgres", "/root/.synapse-exported"]
    timeout    = "2h"
    depends_on = [incus_device.matrix_data, incus_exec.synapse_config]
  }

  # The signing key and homeserver.yaml never land in clear: pulled
  # straight into age files.
  step "incus_file" "synapse_config" {
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/root/migrate/homeserver.yaml"
    destination = "secrets/synapse-homeserver.yaml.age"
    depends_on  = [incus_exec.synapse_config]
  }

  step "incus_file" "signing_key" {
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/etc/matrix-synapse/homeserver.signing.key"
    destination = "secrets/synapse-signing.key.age"
    depends_on  = [incus_exec.stop_synapse]
  }

  step "incus_file" "postgres_password" {
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/root/migrate/postgres-password"
    destination = "secrets/synapse-postgres-password.age"
    depends_on  = [incus_exec.synapse_config]
  }

  # The router forwards 80 and 443 to these NodePorts.
  step "kubernetes_namespace" "ingress" {
    pod_security = "baseline"
  }

  step "helm_release" "ingress" {
    name       = "ingress-nginx"
    chart      = "charts/ingress"
    namespace  = "ingress"
    values     = { httpNodePort = 30080, httpsNodePort = 30443 }
    depends_on = [kubernetes_namespace.ingress]
  }

  step "kubernetes_namespace" "matrix" {
    pod_security = "baseline"
  }

  step "kubernetes_secret" "signing_key" {
    namespace  = "matrix"
    name       = "synapse-signing-key"
    files      = { "homeserver.signing.key" = "secrets/synapse-signing.key.age" }
    depends_on = [kubernetes_namespace.matrix, incus_file.signing_key]
  }

  step "kubernetes_secret" "synapse_config" {
    namespace  = "matrix"
    name       = "synapse-config"
    files      = { "homeserver.yaml" = "secrets/synapse-homeserver.yaml.age" }
    data       = { registration_shared_secret = var.synapse_registration_secret }
    depends_on = [kubernetes_namespace.matrix, incus_file.synapse_config]
  }

  # Volumes bound to the export's directory on the data share.
  step "kubernetes_manifest" "synapse_storage" {
    namespace    = "matrix"
    files        = ["manifests/synapse-storage.yaml"]
    wait_for     = "Bound"
    wait_timeout = "2m"
    depends_on   = [kubernetes_namespace.matrix]
  }

  step "kubernetes_secret" "postgres_password" {
    namespace  = "matrix"
    name       = "synapse-postgres"
    files      = { password = "secrets/synapse-postgres-password.age" }
    depends_on = [kubernetes_namespace.matrix, incus_file.postgres_password]
  }

  # On PostgreSQL, one of the old VM's major version (replicas 0 on SQLite).
  step "helm_release" "synapse_postgres" {
    name      = "synapse-postgres"
    chart     = "charts/app"
    namespace = "matrix"
    values = {
      image    = "postgres:15-bookworm"
      replicas = var.synapse_database == "psycopg2" ? 1 : 0
      # No marker: a restore failed half-way; initialise and restore again.
      command = ["sh", "-c", "[ -e \"$PGDATA/.migrate-restored\" ] || rm -rf \"$PGDATA\"; exec docker-entrypoint.sh postgres"]
      port    = 5432
      env = {
        POSTGRES_USER        = "synapse"
        POSTGRES_DB          = "synapse"
        POSTGRES_INITDB_ARGS = "--encoding=UTF8 --lc-collate=C --lc-ctype=C"
        PGDATA               = "/var/lib/postgresql/data/pgdata"
      }
      secretEnv = { POSTGRES_PASSWORD = { secret = "synapse-postgres", key = "password" } }
      claims = {
        data    = { claim = "synapse-postgres", mountPath = "/var/lib/postgresql/data" }
        restore = { claim = "synapse-postgres-init", mountPath = "/docker-entrypoint-initdb.d" } # the export's dump and its script
      }
      probe     = { tcp = true }
      resources = { requests = { cpu = "250m", memory = "256Mi" }, limits = { memory = "1Gi" } }
    }
    depends_on = [kubernetes_secret.postgres_password, kubernetes_manifest.synapse_storage, incus_exec.export_synapse]
  }

  # The media unpacked and the data given to Synapse's user (991).
  step "kubernetes_job" "restore_synapse" {
    namespace = "matrix"
    name      = "synapse-restore"
    timeout   = "30m"
    job = {
      template = { spec = {
        restartPolicy   = "Never"
        securityContext = { runAsNonRoot = false }
        containers = [{
          name  = "restore"
          image = "busybox:1.36"
          command = ["sh", "-c", file("scripts/synapse-restore.sh")]
          volumeMounts = [{ name = "data", mountPath = "/data" }]
        }]
        volumes = [{ name = "data", persistentVolumeClaim = { claimName = "synapse-data" } }]
      } }
    }
    depends_on = [kubernetes_manifest.synapse_storage, incus_exec.export_synapse]
  }

  step "helm_release" "synapse" {
    chart     = "charts/app"
    namespace = "matrix"
    wait      = true
    timeout   = "10m"
    values = {
      image  = not_older(var.synapse_image, var.synapse_version)
      port   = 8008
      env    = { SYNAPSE_CONFIG_PATH = "/config/homeserver.yaml" }
      claims = { data = { claim = "synapse-data", mountPath = "/data" } }
      secretFiles = {
        config  = { secret = "synapse-config", mountPath = "/config" }
        signing = { secret = "synapse-signing-key", mountPath = "/keys" }
      }
      probe     = { http = "/health" }
      resources = { requests = { cpu = "250m", memory = "512Mi" }, limits = { memory = "2Gi" } }
    }
    depends_on = [kubernetes_job.restore_synapse, kubernetes_secret.signing_key, kubernetes_secret.synapse_config, helm_release.synapse_postgres]
  }

  step "kubernetes_secret" "synapse_tls" {
    namespace  = "matrix"
    name       = "synapse-tls"
    type       = "kubernetes.io/tls"
    files      = { "tls.crt" = var.matrix_tls_cert, "tls.key" = var.matrix_tls_key }
    depends_on = [kubernetes_namespace.matrix]
  }

  step "kubernetes_manifest" "ingress" {
    namespace = "matrix"
    objects = [{
      apiVersion = "networking.k8s.io/v1"
      kind       = "Ingress"
      metadata   = { name = "synapse" }
      spec = {
        ingressClassName = "nginx"
        # Without it ingress-nginx serves a self-signed certificate.
        tls = [{ hosts = [var.matrix_domain], secretName = "synapse-tls" }]
        rules = [{
          host = var.matrix_domain
          http = { paths = [{ path = "/", pathType = "Prefix", backend = { service = { name = "synapse", port = { number = 8008 } } } }] }
        }]
      }
    }]
    depends_on = [helm_release.synapse, helm_release.ingress, kubernetes_secret.synapse_tls]
  }

  step "approval" "dns" {
    message        = "Point ${var.matrix_domain} (and the home services' names) at the home's public address at the registrar, and forward ports 80 and 443 on the router to the Talos node's 30080 and 30443."
    revert_message = "Point ${var.matrix_domain} back at the old matrix VM at the registrar, and the router's ports 80 and 443 back at it, before the old VM serves again."
    depends_on     = [kubernetes_manifest.ingress]
  }

  step "incus_instance_state" "old_matrix" {
    instance          = var.matrix_vm
    state             = "stopped"
    snapshot_before   = true
    keep_for_rollback = true
    depends_on        = [approval.dns, incus_exec.export_synapse, incus_file.signing_key, incus_file.synapse_config]
  }

  # From the internet, the certificate verified (matrix_ca or the system's).
  check "http_check" "well_known" {
    url      = "${var.matrix_url}/.well-known/matrix/server"
    ca       = var.matrix_ca
    contains = "${var.matrix_domain}:443"
    timeout  = var.federation_wait
  }

  check "http_check" "federation" {
    url     = "${var.matrix_url}/_matrix/federation/v1/version"
    ca      = var.matrix_ca
    timeout = var.federation_wait
  }

  check "http_check" "synapse_client" {
    url      = "${var.matrix_url}/_matrix/client/versions"
    ca       = var.matrix_ca
    contains = "\"versions\""
    timeout  = var.federation_wait
  }
}

phase "cleanup" {
  description = "The old services and k3s VMs are stopped, not deleted: kept with a snapshot, in case of a way back, until retain_old_vms_until."

  step "incus_instance_state" "old_services" {
    instance          = var.services_vm
    state             = "stopped"
    snapshot_before   = true
    keep_for_rollback = true
  }

  step "incus_instance_state" "old_k3s" {
    instance          = var.k3s_vm
    state             = "stopped"
    snapshot_before   = true
    keep_for_rollback = true
  }

  # Deleting them later, in a runbook of their own: an incus_instance with
  # ensure = "absent" and retain_until = var.retain_old_vms_until.
}

# What the household notices: each service's window of downtime, from
# the start of its old instance's stop to its new one's first passing
# check (migrate status lists them; migrate report draws them).
service "jellyfin" {
  stop         = group.jellyfin.incus_exec.stop
  serving      = group.jellyfin.http_check.health
  max_downtime = "2h"
}

service "frigate" {
  stop         = group.frigate.incus_exec.stop
  serving      = group.frigate.http_check.health
  max_downtime = "2h"
}

service "samba" {
  stop         = incus_exec.stop_samba
  serving      = smb_check.samba_shares
  max_downtime = "30m"
}

service "matrix" { # from the internet: DNS and the router's forwards included
  stop         = incus_exec.stop_synapse
  serving      = http_check.synapse_client
  max_downtime = "2h"
}

# What the parts stand for, for migrate init (which writes this runbook for
# the host it reads); they change nothing a run does.

role "services" { # Samba, Jellyfin, Frigate
  vm     = var.services_vm
  inside = [group.jellyfin.incus_exec.stop, group.frigate.incus_exec.stop, group.jellyfin.incus_exec.export, group.frigate.incus_exec.export, incus_exec.stop_samba, incus_exec.samba_users, incus_file.samba_users]
  data   = incus_device.services_data
  stop   = incus_instance_state.old_services
}

role "matrix" { # Synapse
  vm     = var.matrix_vm
  inside = [incus_exec.stop_synapse, incus_exec.export_synapse, incus_exec.synapse_config, incus_file.synapse_config, incus_file.signing_key, incus_file.postgres_password]
  data   = incus_device.matrix_data
  stop   = incus_instance_state.old_matrix
}

role "k3s" { # the playground: optional
  vm   = var.k3s_vm
  stop = incus_instance_state.old_k3s
}

role "host" {
  remote       = var.incus_remote
  storage_pool = var.storage_pool
  data_pool    = var.data_pool
  data_volume  = var.data_volume
  lan_bridge   = var.lan_bridge
  lan_network  = var.lan_network
  igpu_pci     = var.igpu_pci
  # What the move makes in storage_pool (their sizes are read from the steps).
  disks = [group.node.incus_instance.vm, incus_volume.bulk, group.rehearsal.incus_instance.vm, incus_volume.talos_iso]
  # What passes the iGPU through, or checks it.
  gpu = [group.rehearsal.incus_instance.vm, talos_read.rehearsal_igpu, group.node.incus_instance.vm]
}

role "node" {
  vm      = group.node.incus_instance.vm
  cpu     = var.node_cpu
  memory  = var.node_memory
  mac     = var.node_mac
  address = var.node_address
  talos   = var.talos_version
}

role "rehearsal" {
  vm         = group.rehearsal.incus_instance.vm
  mac        = var.rehearsal_mac
  address    = var.rehearsal_address
  igpu_check = talos_read.rehearsal_igpu # the i915 driver sees the iGPU
}

role "jellyfin" {
  version       = var.jellyfin_version
  image         = var.jellyfin_image
  hwaccel       = var.jellyfin_hwaccel
  library_paths = var.jellyfin_library_paths
}

role "frigate" {
  version = var.frigate_version
  image   = var.frigate_image
  install = var.frigate_install
  hwaccel = var.frigate_hwaccel
}

role "synapse" {
  version  = var.synapse_version
  image    = var.synapse_image
  database = var.synapse_database
  domain   = var.matrix_domain
  url      = var.matrix_url
  tls_cert = var.matrix_tls_cert
  tls_key  = var.matrix_tls_key
}

role "samba" {
  users = var.samba_users
}

role "forge" {
  url = var.forge_url
}

role "retention" {
  until = var.retain_old_vms_until
}
