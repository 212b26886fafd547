# examples/homelab/main.hcl as it was before groups (commit 35c2d6b):
# every step written out. The demo runs its first three phases, then
# today's runbook, whose moved.hcl carries their records to the grouped
# addresses (tests/examples TestHomelabMovedFromBeforeGroups too). Kept as
# it was: do not edit, but for what a change of the example's other files
# (patches, charts, scripts) requires of it.
#
# The migration of the brief: a home server's three Incus VMs (services:
# Samba, Jellyfin, Frigate; matrix: Synapse; k3s: a playground) replaced
# by one Talos Linux VM running Kubernetes. First a rehearsal on a
# throwaway VM (what could disqualify Talos), then the five phases the
# move was done in. The old VMs are stopped, never deleted, and
# `migrate rollback` brings them back.
#
#   export MIGRATE_AGE_IDENTITY=secrets/demo-identity.txt   # the DEMO identity
#   migrate plan --runbook examples/homelab
#   migrate run  --runbook examples/homelab --phase rehearsal
#   migrate run  --runbook examples/homelab --phase platform
#   ...
#   migrate rollback --runbook examples/homelab
#
# Secrets live beside the runbook, age-encrypted (secrets/*.age,
# secrets.auto.hcl.age); patches, charts and manifests stay plain so that
# reviews can read them. Against a real home server, change the variables
# below (the host's remote, pools and LAN bridge, the node's MAC and the
# address the router reserves for it, the iGPU's PCI address, the domain).
#
# The host is an IncusOS server: no shell, only its HTTPS API (8443) with a
# trusted client certificate, from another machine. migrate reaches it as
# the incus CLI does, through a remote of the CLI's configuration:
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
  # The NIC's way onto the LAN, without its MAC: by the managed physical
  # network when there is one, else bridged.
  lan_nic = var.lan_network != "" ? tomap({ type = "nic", network = var.lan_network }) : tomap({ type = "nic", nictype = "bridged", parent = var.lan_bridge })
  # The Talos system disk by what it is, never by a device name that can
  # change: Incus gives each disk device of a VM the serial
  # incus_<device>, and both Talos VMs install on their "root" device.
  system_disk = "disk.serial == \"incus_root\""
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

# The applications as the old VMs run them (migrate init reads them): an
# image is never older than what ran there, since a database is migrated
# one way; not_older refuses one at plan, naming both versions.
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
  # What the moved settings decode with: what the old VM used when it
  # used the GPU, else VA-API on the iGPU; as before without a render node.
  jellyfin_hwaccel = !var.hwaccel ? var.jellyfin_hwaccel : contains(["vaapi", "qsv"], var.jellyfin_hwaccel) ? var.jellyfin_hwaccel : "vaapi"
  frigate_hwaccel  = !var.hwaccel ? var.frigate_hwaccel : var.frigate_hwaccel != "" ? var.frigate_hwaccel : "preset-vaapi"
  # Jellyfin's libraries as init read them; not read: the data volume's
  # media directory, where the old VM had it.
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

# A step runs on the only provider block of its type: incus and helm have
# one each. Talos has two (the rehearsal's node and the real one), so each
# talos_* step says which, with provider = talos.NAME.
provider "incus" "host" {
  remote = var.incus_remote # HTTPS, with the incus CLI's client certificate
}

# The throwaway node of the rehearsal, reached at the address the router
# reserves for its MAC. The same secrets as the real node: it is deleted at
# the end of the phase.
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
  version          = var.talos_version # what the cluster runs: render with THIS version, never the client's
  cluster_name     = "home"
  cluster_endpoint = "https://${var.node_address}:6443"
  extensions       = ["siderolabs/i915"]
  image_factory    = var.image_factory

  install_disk_selector = local.system_disk # the VM's root device, as for the rehearsal
}

provider "helm" "cluster" {
  kubeconfig           = "secrets/kubeconfig.age" # written by talos_kubeconfig.admin, age-encrypted: opened in memory
  default_pod_security = "baseline"           # what Talos enforces
}

# The rehearsal's cluster is deleted with its VM, and with it what was
# made inside it: the VM's deletion discards those steps, so a rollback
# records them as reverted instead of asking a cluster that is gone.
phase "rehearsal" {
  description = "The disqualifying tests on a throwaway Talos VM: a pod writes to the data share and the node reads it back; the iGPU's render node exists and a pod opens it. Nothing real is touched before this passes."

  # The Talos ISO from the Image Factory, of the node's version and
  # schematic (registered first, its installer checked): no ISO by hand.
  # Its nocloud platform reads the first config from the VM's config
  # drive before any maintenance mode.
  step "talos_image" "talos" {
    provider = talos.node
    platform = "nocloud"
    path     = var.talos_iso_dir == "" ? null : "${var.talos_iso_dir}/talos-${var.talos_version}-i915.iso"
  }

  # The Talos ISO as a storage volume: the rehearsal and the real VM boot it.
  step "incus_volume" "talos_iso" {
    pool        = var.storage_pool
    name        = "talos-${replace(var.talos_version, ".", "-")}-i915"
    source_file = talos_image.talos.path
  }

  # The first config, with the cluster's keys, never crosses the LAN:
  # rendered here, it goes into the VM's cloud-init.user-data through the
  # Incus host's API, and the node installs from its config drive.
  step "talos_machine_config" "rehearsal" {
    provider      = talos.rehearsal
    first_install = "nocloud"
    patches       = ["patches/rehearsal.yaml"]
    verify        = { services = ["apid"] }
  }

  step "incus_instance" "rehearsal" {
    type   = "virtual-machine"
    empty  = true
    cpu    = var.rehearsal_cpu
    memory = var.rehearsal_memory
    config = {
      "security.secureboot"  = "false" # the Factory's ISO is not signed for Secure Boot
      "cloud-init.user-data" = talos_machine_config.rehearsal.user_data
    }
    devices = {
      root    = { type = "disk", pool = var.storage_pool, path = "/", size = "16GiB" }
      data    = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/var/mnt/data" } # virtiofs tag incus_data
      lan     = merge(local.lan_nic, { hwaddr = var.rehearsal_mac })
      igpu    = { type = "gpu", gputype = "physical", pci = var.igpu_pci }
      install = { type = "disk", pool = incus_volume.talos_iso.pool, source = incus_volume.talos_iso.name, "boot.priority" = "10" }
      cidata  = { type = "disk", source = "cloud-init:config" } # the config drive: the user-data above
    }
    start = true # no wait_for: on the LAN, only the router knows its address
  }

  # Installed: the node answers on its authenticated API (mTLS with the
  # cluster's client certificate)...
  step "talos_service_health" "rehearsal_installed" {
    provider   = talos.rehearsal
    services   = ["apid"]
    depends_on = [incus_instance.rehearsal]
  }

  # ...so its config leaves the Incus host's instance config, and the
  # drive goes.
  step "incus_device" "rehearsal_config_cleared" {
    instance     = incus_instance.rehearsal.name
    name         = "cidata"
    ensure       = "absent"
    unset_config = ["cloud-init.user-data"]
    depends_on   = [talos_service_health.rehearsal_installed]
  }

  step "talos_bootstrap" "rehearsal" {
    provider   = talos.rehearsal
    depends_on = [talos_service_health.rehearsal_installed]
  }

  step "talos_kubeconfig" "rehearsal" {
    provider   = talos.rehearsal
    path       = "secrets/rehearsal.kubeconfig.age" # the admin key: age-encrypted, opened in memory
    depends_on = [talos_bootstrap.rehearsal]
  }

  # The node as its machine config and its VM make it: the plan judges
  # every pod after this against it before the VM exists (a Talos control
  # plane taints itself NoSchedule unless the patch allows scheduling).
  step "kubernetes_ready" "rehearsal" {
    kubeconfig    = talos_kubeconfig.rehearsal.path
    timeout       = "10m"
    node_spec     = talos_machine_config.rehearsal.node
    node_capacity = { cpu = var.rehearsal_cpu, memory = var.rehearsal_memory }
  }

  # The same exception as the real media namespace: hostPath needs it.
  step "kubernetes_namespace" "rehearsal_media" {
    kubeconfig   = talos_kubeconfig.rehearsal.path
    name         = "media"
    pod_security = "privileged"
    depends_on   = [kubernetes_ready.rehearsal]
  }

  # The data test of the brief: a pod writes a file on the share...
  step "kubernetes_job" "rehearsal_write" {
    kubeconfig = talos_kubeconfig.rehearsal.path
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
    kubeconfig = talos_kubeconfig.rehearsal.path
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


  # ...and the node reads it back through the Talos API (talosctl read).
  step "talos_read" "rehearsal_data" {
    provider      = talos.rehearsal
    path          = "/var/mnt/data/.migrate/rehearsal"
    expect        = "written by a pod of the rehearsal"
    error_message = "The data share is not shared between the pods and the node: check the VM's data device (virtiofs, tag incus_data) and the ExternalVolumeConfig of patches/rehearsal.yaml."
    depends_on    = [kubernetes_job.rehearsal_write]
  }

  # The GPU test, as the apps will use it: the i915 driver (the
  # schematic's extension) bound to a real Intel GPU made the render node
  # that VA-API opens (its sysfs entry says DRM's numbers)...
  step "talos_read" "rehearsal_igpu" {
    provider      = talos.rehearsal
    path          = "/sys/class/drm/renderD128/dev"
    expect        = "226:128"
    error_message = "No render node (/dev/dri/renderD128) on the rehearsal node: the i915 driver did not bind an Intel GPU. Does the VM have the gpu device (pci ${var.igpu_pci}), and does the schematic carry siderolabs/i915? Without it Jellyfin and Frigate decode video on the CPU, as they did on the old VM all along."
    depends_on    = [talos_service_health.rehearsal_installed]
  }

  # ...and a pod given /dev/dri as Jellyfin's and Frigate's are (hostPath,
  # privileged) opens it read-write.
  step "kubernetes_job" "rehearsal_render" {
    kubeconfig = talos_kubeconfig.rehearsal.path
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

  # Both passed: the throwaway VM goes (this cannot be undone), and all
  # that was made inside it: a rollback has nothing to undo there, and a
  # plan nothing to read.
  step "incus_instance" "rehearsal_deleted" {
    name       = "rehearsal"
    ensure     = "absent"
    # after its config is cleared: one change of the instance at a time
    depends_on = [talos_read.rehearsal_data, talos_read.rehearsal_igpu, kubernetes_job.rehearsal_render, kubernetes_job.rehearsal_copy_rate, incus_device.rehearsal_config_cleared]
    discards = [
      incus_instance.rehearsal, talos_machine_config.rehearsal, incus_device.rehearsal_config_cleared,
      talos_bootstrap.rehearsal, kubernetes_namespace.rehearsal_media, kubernetes_job.rehearsal_write, kubernetes_job.rehearsal_copy_rate, kubernetes_job.rehearsal_render,
    ]
  }
}

phase "platform" {
  description = "One Talos VM (the data share, the bulk disk, the iGPU, booted from the ISO volume); the whole machine in one file: first install, bootstrap, kubeconfig."

  # The separate big disk, chosen in the patch by its size (149-151 GiB).
  step "incus_volume" "bulk" {
    pool         = var.storage_pool
    size         = "150GiB"
    content_type = "block"
  }

  # The first install, through the Incus host's API (the plan says so,
  # and that it cannot be undone): the config is the VM's user-data, its
  # config drive. Later changes of the patch go through the ladder:
  # dry-run diff, TRY, verify, then no-reboot.
  step "talos_machine_config" "node" {
    provider      = talos.node
    first_install = "nocloud"
    patches       = ["patches/node.yaml"]
    try_timeout   = "2m"
    rendered      = "rendered/controlplane.yaml"
    verify = {
      services = ["apid", "machined"]
    }
  }

  step "incus_instance" "talos" {
    type   = "virtual-machine"
    empty  = true
    cpu    = var.node_cpu
    memory = var.node_memory
    config = {
      "security.secureboot"  = "false"
      "cloud-init.user-data" = talos_machine_config.node.user_data
    }
    devices = {
      root    = { type = "disk", pool = var.storage_pool, path = "/", size = "64GiB" }
      data    = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/var/mnt/data" } # virtiofs tag incus_data
      bulk    = { type = "disk", pool = incus_volume.bulk.pool, source = incus_volume.bulk.name }
      lan     = merge(local.lan_nic, { hwaddr = var.node_mac })
      igpu    = { type = "gpu", gputype = "physical", pci = var.igpu_pci }
      install = { type = "disk", pool = incus_volume.talos_iso.pool, source = incus_volume.talos_iso.name, "boot.priority" = "10" }
      cidata  = { type = "disk", source = "cloud-init:config" } # the config drive: the user-data above
    }
    start = true # no wait_for: on the LAN, only the router knows its address
  }

  # Installed: the node answers on its authenticated API (mTLS).
  step "talos_service_health" "node_installed" {
    provider   = talos.node
    services   = ["apid", "machined"]
    depends_on = [incus_instance.talos]
  }

  # The cluster's keys leave the Incus host's instance config, and the
  # config drive goes (rollback puts the drive back, not the key).
  step "incus_device" "talos_config_cleared" {
    instance     = incus_instance.talos.name
    name         = "cidata"
    ensure       = "absent"
    unset_config = ["cloud-init.user-data"]
    depends_on   = [talos_service_health.node_installed]
  }

  # Installed: the VM boots from its disk from now on, never the ISO again
  # (a reboot into the installer would wipe nothing, but boots no cluster).
  # Rollback attaches it again. After the drive: one change of the
  # instance at a time (each is made with the ETag its plan read).
  step "incus_device" "talos_iso_detached" {
    instance   = incus_instance.talos.name
    name       = "install"
    ensure     = "absent"
    depends_on = [incus_device.talos_config_cleared]
  }

  step "talos_bootstrap" "etcd" {
    provider   = talos.node
    depends_on = [talos_service_health.node_installed]
  }

  step "talos_kubeconfig" "admin" {
    provider   = talos.node
    path       = "secrets/kubeconfig.age" # the admin key: age-encrypted, opened in memory
    depends_on = [talos_bootstrap.etcd]
  }

  step "kubernetes_ready" "node" {
    kubeconfig    = talos_kubeconfig.admin.path
    node          = var.hostname
    timeout       = "10m"
    node_spec     = talos_machine_config.node.node # judged against before the cluster exists
    node_capacity = { cpu = var.node_cpu, memory = var.node_memory }
  }

  check "talos_service_health" "control_plane" {
    provider = talos.node
    services = ["etcd", "kubelet", "apid"]
  }
}

phase "data-apps" {
  description = "Jellyfin and Frigate with the host's data, the iGPU, and their configuration and databases moved from the old services VM onto the data share, on fixed NodePorts of the LAN: their namespace is privileged, in git, on purpose."

  # The old Jellyfin and Frigate stop first: a database copied while it
  # writes is not a copy, and from now on only the new ones write their
  # data and the recordings on the share. Rollback starts them again
  # (after the cleanup's rollback started the VM itself).
  step "incus_exec" "stop_jellyfin" {
    instance = var.services_vm
    command  = ["systemctl", "stop", "jellyfin"]
    revert   = ["systemctl", "start", "jellyfin"]
  }

  # Frigate as it is installed: its documented install is the Docker
  # Compose project "frigate" (no frigate.service: systemctl would fail).
  step "incus_exec" "stop_frigate" {
    instance = var.services_vm
    command  = var.frigate_install == "compose" ? ["docker", "compose", "-p", "frigate", "stop"] : ["systemctl", "stop", "frigate"]
    revert   = var.frigate_install == "compose" ? ["docker", "compose", "-p", "frigate", "start"] : ["systemctl", "start", "frigate"]
  }

  # The data volume, attached to the old VM for the copies, as the Matrix
  # move does: from the old VM to the volume on the host, never through
  # the machine running migrate. Rollback detaches it.
  step "incus_device" "services_data" {
    instance   = var.services_vm
    name       = "migrate-data"
    device     = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/mnt/migrate-data" }
    depends_on = [incus_exec.stop_jellyfin, incus_exec.stop_frigate]
  }

  # Jellyfin's users, library database, metadata and settings, once, into
  # apps/jellyfin of the data volume: laid out as the official image
  # wants its /config (Debian's /var/lib/jellyfin is the image's data
  # directory /config, /etc/jellyfin its /config/config; the cache is not
  # moved: Jellyfin rebuilds it), the old paths rewritten in the moved
  # settings, hardware decoding switched on when the node has the render
  # node. Every library must be one the runbook mounts (under the data
  # volume), or the move stops before it copies. Made aside and renamed
  # when whole; the marker, in the old VM, says it is done (the new
  # Jellyfin changes the copy).
  step "incus_exec" "export_jellyfin" {
    instance = var.services_vm
    env = {
      LIBRARIES = join("\n", local.jellyfin_libraries)
      OLD_DATA  = var.old_data_path
      HWACCEL   = local.jellyfin_hwaccel
    }
    command = ["sh", "-c", <<-EOT
      set -e
      cat /var/lib/jellyfin/root/default/*/options.xml 2>/dev/null | sed -n 's|.*<Path>\(.*\)</Path>.*|\1|p' | while IFS= read -r p; do
        case "$p" in "$OLD_DATA"/*) ;; *) echo "Jellyfin's library $p is not on the data volume ($OLD_DATA): move it there first, or the new Jellyfin cannot see it" >&2; exit 1 ;; esac
        printf '%s\n' "$LIBRARIES" | while IFS= read -r lib; do case "$p" in "$lib" | "$lib"/*) echo mounted ;; esac; done | grep -q mounted ||
          { echo "Jellyfin's library $p is not under a path the new pod mounts ($(printf '%s\n' "$LIBRARIES" | paste -sd,)): add it to var.jellyfin_library_paths (migrate init reads them)" >&2; exit 1; }
        echo "library: $p"
      done
      mkdir -p /mnt/migrate-data/apps && cd /mnt/migrate-data/apps
      rm -rf jellyfin.partial && mkdir jellyfin.partial
      echo "databases: $(ls /var/lib/jellyfin/data/*.db | wc -l) ($(du -ch /var/lib/jellyfin/data/*.db | tail -1 | cut -f1)), data: $(du -sh /var/lib/jellyfin | cut -f1), configuration: $(ls /etc/jellyfin | wc -l) files"
      cp -a /var/lib/jellyfin/. jellyfin.partial/
      mkdir -p jellyfin.partial/config && cp -a /etc/jellyfin/. jellyfin.partial/config/
      # The Debian paths, where a setting names one, are the image's.
      find jellyfin.partial/config jellyfin.partial/root -name '*.xml' -exec sed -i \
        -e 's|/etc/jellyfin|/config/config|g' -e 's|/var/lib/jellyfin|/config|g' \
        -e 's|/var/cache/jellyfin|/cache|g' -e 's|/var/log/jellyfin|/config/log|g' {} +
      enc=jellyfin.partial/config/encoding.xml
      if [ "$HWACCEL" != none ]; then
        [ -f "$enc" ] || printf '<?xml version="1.0" encoding="utf-8"?>\n<EncodingOptions xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema">\n</EncodingOptions>\n' > "$enc"
        sed -i -e '/<HardwareAccelerationType>/d' -e '/<VaapiDevice>/d' \
          -e "s|</EncodingOptions>|  <HardwareAccelerationType>$HWACCEL</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>\n</EncodingOptions>|" "$enc"
        grep -q "<HardwareAccelerationType>$HWACCEL</HardwareAccelerationType>" "$enc" || { echo "$enc: hardware decoding could not be switched on" >&2; exit 1; }
        echo "hardware decoding: $HWACCEL on /dev/dri/renderD128 (the old VM: $(sed -n 's|.*<HardwareAccelerationType>\(.*\)</HardwareAccelerationType>.*|\1|p' /etc/jellyfin/encoding.xml 2>/dev/null || echo none))"
      fi
      mv jellyfin.partial jellyfin
      touch /root/.jellyfin-exported
      echo "copied: $(du -sh jellyfin | cut -f1) in /mnt/migrate-data/apps/jellyfin"
    EOT
    ]
    creates    = "/root/.jellyfin-exported"
    revert     = ["sh", "-c", "rm -rf /mnt/migrate-data/apps/jellyfin /mnt/migrate-data/apps/jellyfin.partial /root/.jellyfin-exported && { rmdir /mnt/migrate-data/apps 2>/dev/null || true; }"]
    timeout    = "1h"
    depends_on = [incus_exec.stop_jellyfin, incus_device.services_data]
  }

  # Frigate's /config (config.yml, the cameras; frigate.db, the events
  # and the index of the recordings), once, into apps/frigate, with
  # hardware decoding switched on when the node has the render node. The
  # recordings are on the share already, where the new Frigate mounts
  # them; a Compose file that keeps them elsewhere stops the move first.
  step "incus_exec" "export_frigate" {
    instance = var.services_vm
    env = {
      OLD_DATA = var.old_data_path
      HWACCEL  = local.frigate_hwaccel
    }
    command = ["sh", "-c", <<-EOT
      set -e
      if [ -f /opt/frigate/docker-compose.yml ]; then
        rec=$(sed -n 's|^[[:space:]]*-[[:space:]]*["'\'']\{0,1\}\([^:"'\'']*\):/media/frigate.*|\1|p' /opt/frigate/docker-compose.yml)
        case "$rec" in "" | "$OLD_DATA/frigate" | "$OLD_DATA/frigate/") ;; *) echo "Frigate's recordings are in $rec (docker-compose.yml), not on the data volume ($OLD_DATA/frigate), where the new Frigate finds them: move them there first" >&2; exit 1 ;; esac
      fi
      mkdir -p /mnt/migrate-data/apps && cd /mnt/migrate-data/apps
      rm -rf frigate.partial
      echo "configuration: config.yml ($(wc -l < /opt/frigate/config/config.yml) lines), database: frigate.db ($(du -h /opt/frigate/config/frigate.db | cut -f1))"
      cp -a /opt/frigate/config frigate.partial
      if [ -n "$HWACCEL" ]; then
        # The top-level ffmpeg.hwaccel_args only (a camera's own stays),
        # indented as the block is.
        cfg=frigate.partial/config.yml
        block=$(sed -n '/^ffmpeg:/,/^[^[:space:]#]/p' "$cfg")
        ind=$(printf '%s\n' "$block" | sed -n '2,$s/^\([[:space:]][[:space:]]*\)[^[:space:]#].*/\1/p' | head -1)
        ind=$${ind:-  }
        if printf '%s\n' "$block" | grep -q "^$ind""hwaccel_args:[[:space:]]*$"; then
          echo "$cfg: ffmpeg.hwaccel_args is a list: set it to $HWACCEL by hand in /opt/frigate/config/config.yml, or set hwaccel = false" >&2
          exit 1
        fi
        if [ -n "$block" ]; then
          sed -i -e "/^ffmpeg:/,/^[^[:space:]#]/{/^$ind""hwaccel_args:/d;}" -e "s|^ffmpeg:[[:space:]]*$|ffmpeg:\n$ind""hwaccel_args: $HWACCEL|" "$cfg"
        else
          printf 'ffmpeg:\n  hwaccel_args: %s\n' "$HWACCEL" >> "$cfg"
        fi
        grep -q "^$ind""hwaccel_args: $HWACCEL\$" "$cfg" || { echo "$cfg: hardware decoding could not be switched on (is its ffmpeg block written as a flow mapping?)" >&2; exit 1; }
        echo "hardware decoding: hwaccel_args $HWACCEL (the old VM: $(sed -n '/^ffmpeg:/,/^[^[:space:]]/s|^  hwaccel_args:[[:space:]]*||p' /opt/frigate/config/config.yml | grep . || echo CPU))"
      fi
      mv frigate.partial frigate
      touch /root/.frigate-exported
      echo "copied: $(du -sh frigate | cut -f1) in /mnt/migrate-data/apps/frigate"
    EOT
    ]
    creates    = "/root/.frigate-exported"
    revert     = ["sh", "-c", "rm -rf /mnt/migrate-data/apps/frigate /mnt/migrate-data/apps/frigate.partial /root/.frigate-exported && { rmdir /mnt/migrate-data/apps 2>/dev/null || true; }"]
    timeout    = "1h"
    depends_on = [incus_exec.stop_frigate, incus_device.services_data]
  }

  step "kubernetes_namespace" "media" {
    pod_security = "privileged" # hostPath for the ZFS data and the bulk disk, /dev/dri for the iGPU
  }

  step "helm_release" "jellyfin" {
    chart     = "charts/app"
    namespace = "media"
    values = {
      image      = not_older(var.jellyfin_image, var.jellyfin_version)
      port       = 8096
      nodePort   = 30096 # http://NODE:30096 on the LAN
      gpu        = true
      privileged = true # /dev/dri from a hostPath is usable only by a privileged container (no device plugin)
      # Each library where the old VM had it: the paths in its database
      # stay true. The configuration is the export's, and must be there
      # (Directory): an empty one would be a new server.
      hostData = merge({
        config = { path = "/var/mnt/data/apps/jellyfin", mountPath = "/config", type = "Directory" }
        cache  = { path = "/var/mnt/bulk/jellyfin/cache", mountPath = "/cache", type = "DirectoryOrCreate" }
        }, { for i, p in local.jellyfin_libraries : "library-${i}" => {
          path = "/var/mnt/data${trimprefix(p, var.old_data_path)}", mountPath = p, readOnly = true
      } })
      probe     = { http = "/health" }
      resources = { requests = { cpu = "500m", memory = "1Gi" }, limits = { memory = "4Gi" } }
    }
    depends_on = [kubernetes_namespace.media, incus_exec.export_jellyfin]
  }

  step "helm_release" "frigate" {
    chart     = "charts/app"
    namespace = "media"
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
    depends_on = [kubernetes_namespace.media, incus_exec.export_frigate]
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

  # No phase is done while one of its apps is down. The releases waited
  # for their pods to be Ready (a pod that crash-loops, on a database
  # newer than its image, fails its release naming the pod and its last
  # log lines); then each app answers its own health check on its
  # NodePort, as a browser on the LAN reaches it. A failure here and
  # migrate rollback starts the old Jellyfin and Frigate again.
  check "http_check" "jellyfin_health" {
    url      = "http://${var.node_address}:30096/health"
    contains = "Healthy"
    timeout  = "5m"
  }

  check "http_check" "frigate_health" {
    url     = "http://${var.node_address}:30500/api/version"
    timeout = "5m"
  }
}

phase "host-services" {
  description = "What the old host did by hand: file shares, and the CI runner that borrowed the host's Docker socket."

  step "kubernetes_namespace" "files" {
    pod_security = "privileged" # Samba serves the ZFS data through hostPath, on the node's port 445
  }

  # The old Samba stops serving the share's files before the new one
  # does: two servers would lock them apart. Rollback starts it again
  # (after the new one is gone).
  step "incus_exec" "stop_samba" {
    instance = var.services_vm
    command  = ["systemctl", "stop", "smbd"]
    revert   = ["systemctl", "start", "smbd"]
  }

  # The old Samba's accounts with their password hashes (pdbedit -L -w:
  # the smbpasswd format; the NT hashes are secrets), written 0600 in the
  # old VM and pulled straight into an age file; only the names are
  # printed. The accounts migrate init read must all be there.
  step "incus_exec" "samba_users" {
    instance = var.services_vm
    env      = { EXPECTED = join(" ", var.samba_users) }
    command = ["sh", "-c", <<-EOT
      set -e
      umask 077
      mkdir -p /root/migrate && cd /root/migrate
      if command -v pdbedit >/dev/null; then
        if ! pdbedit -L -w > smbpasswd.partial 2> pdbedit.err; then
          # No passdb at all: Samba never had an account here.
          [ ! -e /var/lib/samba/private/passdb.tdb ] || { cat pdbedit.err >&2; exit 1; }
          : > smbpasswd.partial
          echo "no Samba passdb here (/var/lib/samba/private/passdb.tdb): no accounts to move"
        fi
        rm -f pdbedit.err
      elif command -v smbd >/dev/null; then
        echo "smbd is installed but pdbedit is not: its accounts cannot be read (Debian's samba package carries pdbedit)" >&2
        exit 1
      else
        : > smbpasswd.partial
        echo "no Samba installed here: no accounts to move"
      fi
      for user in $EXPECTED; do
        grep -q "^$user:" smbpasswd.partial || { echo "the Samba account $user that migrate init read is not in pdbedit -L -w any more: run migrate init again" >&2; exit 1; }
      done
      mv smbpasswd.partial smbpasswd
      echo "Samba accounts: $(cut -d: -f1 smbpasswd | tr '\n' ' ')($(grep -c . smbpasswd || true)), their hashes sealed"
    EOT
    ]
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

  # SMB clients only speak port 445: Samba takes it on the node's network.
  # It starts with the old accounts, as its image imports them: for each
  # smbpasswd line, ACCOUNT_name (the line, whose hash the image keeps)
  # and UID_name (the old uid, so the files' owners stay theirs).
  step "helm_release" "samba" {
    chart     = "charts/app"
    namespace = "files"
    values = {
      image       = "ghcr.io/servercontainers/samba:smbd-only-a3.21.0-s4.20.6-r0"
      command = ["/bin/sh", "-c", <<-EOT
        set -e
        while IFS=: read -r user uid rest; do
          [ -n "$user" ] || continue
          case "$user" in *[!A-Za-z0-9_]*) echo "the Samba account $user cannot be passed as ACCOUNT_$user: rename it" >&2; exit 1 ;; esac
          export "ACCOUNT_$user=$user:$uid:$rest" "UID_$user=$uid"
        done < /users/smbpasswd
        exec /container/scripts/entrypoint.sh runsvdir -P /container/config/runit
      EOT
      ]
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

  # The registration token, from a file sealed to .age-recipients.
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

  # Samba is healthy when an SMB client on the LAN sees its shares: the
  # share list, as smbclient -L asks it, from the node's port 445; given
  # a moved account, as that account with its old password, opening its
  # share.
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

  # Synapse stops first: a database copied while it writes is not a copy.
  # Rollback starts it again (after the VM itself is started again).
  # On PostgreSQL, Synapse starts again once its database accepts
  # connections (the VM just started again boots PostgreSQL too).
  step "incus_exec" "stop_synapse" {
    instance = var.matrix_vm
    command  = ["systemctl", "stop", "matrix-synapse"]
    revert = var.synapse_database != "psycopg2" ? ["systemctl", "start", "matrix-synapse"] : ["sh", "-c", <<-EOT
      # Each cluster (Debian's postgresql@VERSION-NAME units), started
      # if the VM's boot did not.
      pg_lsclusters -h | while read -r version cluster rest; do systemctl start "postgresql@$version-$cluster"; done
      tries=60
      until pg_isready -q; do
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || { echo "PostgreSQL does not accept connections after 2 minutes: see systemctl status postgresql@15-main" >&2; exit 1; }
        sleep 2
      done
      systemctl start matrix-synapse
    EOT
    ]
  }

  # The data volume, attached to the old VM for the copy: the export goes
  # from the old VM to the volume on the host, never through the machine
  # running migrate. Rollback detaches it.
  step "incus_device" "matrix_data" {
    instance   = var.matrix_vm
    name       = "migrate-data"
    device     = { type = "disk", pool = var.data_pool, source = var.data_volume, path = "/mnt/migrate-data" }
    depends_on = [incus_exec.stop_synapse]
  }

  # Synapse's configuration as Synapse reads it (the service starts with
  # --config-path homeserver.yaml --config-path conf.d/: Debian's package
  # keeps server_name and report_stats in conf.d), merged into one file,
  # then rewritten for the pod: the database on the data share (SQLite) or
  # on the PostgreSQL beside it, the media on the share (/data, the
  # claim), the signing key from its Secret (/keys), the pid file in
  # /data, no log file (Synapse logs to stderr: kubectl logs), listening
  # on all the pod's addresses, the registration secret read from the
  # Secret synapse-config (the runbook's, var.synapse_registration_secret),
  # and the .well-known delegation served (federation on 443, the
  # ingress). Its other secrets (macaroon_secret_key, form_secret) stay as
  # they were: the sessions stay valid. Written 0600 beside the old one,
  # never printed; it fails when server_name or report_stats is missing
  # (Synapse would not start) or an old path is left. The merged file,
  # before the rewrite, is what the export reads the database from.
  step "incus_exec" "synapse_config" {
    instance = var.matrix_vm
    env      = { DATABASE = var.synapse_database }
    command = ["sh", "-c", <<-EOT
      set -e
      umask 077
      mkdir -p /root/migrate && cd /root/migrate
      # drop KEY FILE: FILE without the top-level KEY and its block (up
      # to the next top-level key).
      drop() { sed -i "/^$1:/,/^[^[:space:]#-]/{/^$1:/d;/^[^[:space:]#-]/!d;}" "$2"; }
      # value FILE KEY: a top-level scalar, unquoted.
      value() { sed -n "s/^$2:[[:space:]]*//p" "$1" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }
      # arg FILE KEY: a scalar of database.args, unquoted.
      arg() { sed -n '/^database:/,/^[^[:space:]#]/p' "$1" | sed -n "s/^[[:space:]][[:space:]]*$2:[[:space:]]*//p" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }

      # homeserver.yaml, then conf.d/*.yaml in order: a later top-level key
      # replaces an earlier one, as Synapse merges them.
      cp /etc/matrix-synapse/homeserver.yaml merged.partial
      for f in /etc/matrix-synapse/conf.d/*.yaml; do
        [ -f "$f" ] || continue
        keys=$(sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\):.*/\1/p' "$f")
        for k in $keys; do drop "$k" merged.partial; done
        { echo; echo "# from conf.d/$(basename "$f")"; cat "$f"; } >> merged.partial
        echo "merged $f:" $keys
      done
      for key in server_name report_stats; do
        grep -q "^$key:" merged.partial || { echo "no $key in /etc/matrix-synapse/homeserver.yaml nor in conf.d/*.yaml: Synapse would not start without it" >&2; exit 1; }
      done
      engine=$(arg merged.partial name)
      [ "$${engine:-sqlite3}" = "$DATABASE" ] ||
        { echo "the old Synapse's database.name is $${engine:-sqlite3}, the runbook's synapse_database $DATABASE: set it to what the old VM runs (migrate init reads it)" >&2; exit 1; }
      mv merged.partial homeserver.merged.yaml

      cp homeserver.merged.yaml homeserver.yaml.partial
      for key in database media_store_path signing_key_path pid_file log_config registration_shared_secret registration_shared_secret_path serve_server_wellknown; do
        drop "$key" homeserver.yaml.partial
      done
      grep -q '^listeners:' homeserver.yaml.partial || printf 'listeners:\n  - port: 8008\n    type: http\n    x_forwarded: true\n    bind_addresses: [127.0.0.1]\n    resources:\n      - names: [client, federation]\n' >> homeserver.yaml.partial
      sed -i -E "s|^([[:space:]]+bind_addresses:).*|\1 ['0.0.0.0']|" homeserver.yaml.partial
      {
        echo
        echo "# Rewritten by migrate for the pod"
        echo "database:"
        if [ "$DATABASE" = psycopg2 ]; then
          echo "  name: psycopg2"
          echo "  args:"
          echo "    user: synapse"
          printf "    password: '%s'\n" "$(arg homeserver.merged.yaml password | sed "s/'/''/g")"
          echo "    dbname: synapse"
          echo "    host: synapse-postgres"
          echo "    cp_min: 5"
          echo "    cp_max: 10"
        else
          echo "  name: sqlite3"
          echo "  args:"
          echo "    database: /data/homeserver.db"
        fi
        echo "media_store_path: /data/media"
        echo "signing_key_path: /keys/homeserver.signing.key"
        echo "pid_file: /data/homeserver.pid"
        echo "registration_shared_secret_path: /config/registration_shared_secret"
        echo "serve_server_wellknown: true"
      } >> homeserver.yaml.partial
      if grep -nE '^[^#]*/(var/lib|etc|var/log)/matrix-synapse' homeserver.yaml.partial | cut -d: -f1 | grep .; then
        echo "homeserver.yaml: the lines above still name the old VM's paths, which the pod does not have" >&2
        exit 1
      fi
      # The new PostgreSQL's password: the old one (the configuration keeps
      # it); with SQLite, a fresh one for a server that does not run.
      if [ "$DATABASE" = psycopg2 ]; then printf %s "$(arg homeserver.merged.yaml password)" > postgres-password; else od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > postgres-password; fi
      mv homeserver.yaml.partial homeserver.yaml
      echo "homeserver.yaml rewritten for the pod: server_name $(value homeserver.yaml server_name), database $DATABASE ($([ "$DATABASE" = psycopg2 ] && echo synapse-postgres || echo /data/homeserver.db)), media /data/media, signing key /keys/homeserver.signing.key, registration secret from /config"
    EOT
    ]
    creates    = "/root/migrate/homeserver.yaml"
    revert     = ["rm", "-rf", "/root/migrate"]
    depends_on = [incus_exec.stop_synapse]
  }

  # A consistent copy of the database and the media store, once, into a new
  # directory of the data volume (Synapse's data directory from now on, the
  # node's /var/mnt/data/matrix), made by what the old VM has: SQLite
  # through Synapse's own Python (Debian's package carries it, with its
  # sqlite3 module; the sqlite3 program is only suggested), else the
  # sqlite3 program, else the file itself (Synapse is stopped); PostgreSQL
  # by pg_dump as the postgres user. Made aside and renamed when whole, so
  # a crash leaves no half copy; the marker, in the old VM (the restore Job
  # changes the copy), says it is done. It prints what it copies and how
  # much.
  step "incus_exec" "export_synapse" {
    instance = var.matrix_vm
    env      = { DATABASE = var.synapse_database }
    command = ["sh", "-c", <<-EOT
      set -e
      cfg=/root/migrate/homeserver.merged.yaml
      arg() { sed -n '/^database:/,/^[^[:space:]#]/p' "$cfg" | sed -n "s/^[[:space:]][[:space:]]*$1:[[:space:]]*//p" | tail -1 | sed -e 's/[[:space:]]#.*//' -e 's/^["'\'']//' -e 's/["'\'']$//'; }
      media=$(sed -n 's/^media_store_path:[[:space:]]*//p' "$cfg" | tail -1 | tr -d "\"'")
      media=$${media:-/var/lib/matrix-synapse/media}
      cd /mnt/migrate-data
      rm -rf matrix.partial && mkdir matrix.partial
      if [ "$DATABASE" = psycopg2 ]; then
        db=$(arg dbname); db=$${db:-$(arg database)}
        echo "database: PostgreSQL $db, $(runuser -u postgres -- psql -Atc "SELECT pg_size_pretty(pg_database_size('$db'))")"
        # The new PostgreSQL restores it at its first start: the postgres
        # image runs /docker-entrypoint-initdb.d's scripts once, on an
        # empty data directory; the marker says the restore is whole.
        mkdir matrix.partial/postgres-init
        runuser -u postgres -- pg_dump --format=custom --no-owner --no-privileges "$db" > matrix.partial/postgres-init/synapse.dump
        cat > matrix.partial/postgres-init/restore-synapse.sh <<'RESTORE'
      # The old Synapse's database (pg_dump), restored by the postgres
      # image at its first start; the marker says it is whole.
      pg_restore --no-owner --no-privileges --exit-on-error -U "$POSTGRES_USER" -d "$POSTGRES_DB" /docker-entrypoint-initdb.d/synapse.dump
      touch "$PGDATA/.migrate-restored"
      echo "restored the old Synapse's database into $POSTGRES_DB"
      RESTORE
        chmod 0644 matrix.partial/postgres-init/*
        echo "dumped with pg_dump: $(du -h matrix.partial/postgres-init/synapse.dump | cut -f1), restored by the new PostgreSQL at its first start"
      else
        db=$(arg database); db=$${db:-/var/lib/matrix-synapse/homeserver.db}
        echo "database: SQLite $db, $(du -sh "$db" | cut -f1)"
        py=/opt/venvs/matrix-synapse/bin/python
        if [ -x "$py" ]; then
          "$py" -c 'import sqlite3, sys; src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2]); src.backup(dst); dst.close(); src.close()' "$db" matrix.partial/homeserver.db
          echo "copied with Synapse's Python (sqlite3 backup)"
        elif command -v sqlite3 >/dev/null; then
          sqlite3 "$db" ".backup matrix.partial/homeserver.db"
          echo "copied with sqlite3 .backup"
        else
          cp "$db" matrix.partial/homeserver.db
          echo "copied the file (no sqlite3 here; Synapse is stopped)"
        fi
      fi
      echo "media store: $(find "$media" -type f | wc -l) files, $(du -sh "$media" | cut -f1)"
      tar -C "$media" -cf matrix.partial/media.tar .
      mv matrix.partial matrix
      touch /root/.synapse-exported
      echo "copied: $(du -sh matrix | cut -f1) in /mnt/migrate-data/matrix"
    EOT
    ]
    creates    = "/root/.synapse-exported"
    revert     = ["rm", "-rf", "/mnt/migrate-data/matrix", "/mnt/migrate-data/matrix.partial", "/mnt/migrate-data/matrix-postgres", "/root/.synapse-exported"]
    timeout    = "2h"
    depends_on = [incus_device.matrix_data, incus_exec.synapse_config]
  }

  # The signing key is the homeserver's identity, and homeserver.yaml holds
  # its secrets: they never land in clear, neither on disk (pulled straight
  # into age files) nor in the state.
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

  # The new PostgreSQL's password (the old one, which the configuration
  # keeps), straight into an age file.
  step "incus_file" "postgres_password" {
    instance    = var.matrix_vm
    direction   = "pull"
    source      = "/root/migrate/postgres-password"
    destination = "secrets/synapse-postgres-password.age"
    depends_on  = [incus_exec.synapse_config]
  }

  # The ingress controller: the router forwards the internet's 80 and 443
  # to these fixed NodePorts, so it needs no privileged namespace.
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

  # The configuration Synapse starts with (SYNAPSE_CONFIG_PATH), and the
  # registration secret it reads beside it.
  step "kubernetes_secret" "synapse_config" {
    namespace  = "matrix"
    name       = "synapse-config"
    files      = { "homeserver.yaml" = "secrets/synapse-homeserver.yaml.age" }
    data       = { registration_shared_secret = var.synapse_registration_secret }
    depends_on = [kubernetes_namespace.matrix, incus_file.synapse_config]
  }

  # Synapse's data lives on the data share: volumes the cluster binds to
  # the directory the export was pulled into (and to its PostgreSQL's).
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

  # Synapse on PostgreSQL keeps its engine: a PostgreSQL of the old VM's
  # major version (Debian 12's 15) beside it, its files on the data share,
  # initialised as Synapse wants it (UTF8, C collation). With SQLite it
  # runs no pod (replicas 0).
  step "helm_release" "synapse_postgres" {
    name      = "synapse-postgres"
    chart     = "charts/app"
    namespace = "matrix"
    values = {
      image    = "postgres:15-bookworm"
      replicas = var.synapse_database == "psycopg2" ? 1 : 0
      # A restore that failed half-way leaves no marker: the data
      # directory goes, and the image initialises and restores again
      # (the pod crash-loops, saying why), never serving half a database.
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

  # The restore, once, inside the cluster: the media unpacked where the
  # new homeserver.yaml says (/data/media; the SQLite file is in place
  # already, a PostgreSQL dump is restored by synapse-postgres itself),
  # the data directory given to Synapse's user (991 in the official
  # image).
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
          command = ["sh", "-c", <<-EOT
            set -e
            if [ -f /data/media.tar ]; then
              mkdir -p /data/media && tar -C /data/media -xf /data/media.tar && rm /data/media.tar
              echo "media store: $(find /data/media -type f | wc -l) files"
            fi
            # Synapse's; the PostgreSQL dump stays the postgres image's.
            find /data -path /data/postgres-init -prune -o -exec chown 991:991 {} +
          EOT
          ]
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
    # The image starts Synapse with --config-path SYNAPSE_CONFIG_PATH: the
    # old VM's configuration, rewritten, from the Secret synapse-config.
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

  # The homeserver's certificate for the ingress (kubernetes.io/tls).
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
        # TLS for matrix_domain with the certificate of synapse-tls
        # (kubernetes_secret.synapse_tls). Without it ingress-nginx would
        # serve a self-signed certificate of its own, and the checks below
        # would refuse it.
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

  # From the internet, over TLS, the certificate verified (against
  # matrix_ca, or the system's CAs): the delegation other servers read
  # first, then federation itself.
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

  # And Synapse answers its clients: the versions an Element app asks
  # first, through the same ingress.
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

  # Deleting them, later, in a runbook of its own: refused until
  # retain_until has passed.
  #
  # step "incus_instance" "delete_old_services" {
  #   name         = var.services_vm
  #   ensure       = "absent"
  #   retain_until = var.retain_old_vms_until
  # }
}

# What this runbook's parts stand for, for migrate init, which writes a new
# runbook from this one for the host it reads: the old VMs and the steps
# that reach into them or stop them, the disks the move makes, the node,
# the LAN, the applications' images. Roles change nothing a plan or a run
# does; renaming a step, variable or phase they name without them is an
# error here, at the role.

# Each service's window of downtime (as today's runbook declares them).
service "jellyfin" {
  stop         = incus_exec.stop_jellyfin
  serving      = http_check.jellyfin_health
  max_downtime = "2h"
}

service "frigate" {
  stop         = incus_exec.stop_frigate
  serving      = http_check.frigate_health
  max_downtime = "2h"
}

service "samba" {
  stop         = incus_exec.stop_samba
  serving      = smb_check.samba_shares
  max_downtime = "30m"
}

service "matrix" {
  stop         = incus_exec.stop_synapse
  serving      = http_check.synapse_client
  max_downtime = "2h"
}

role "services" { # Samba, Jellyfin, Frigate
  vm     = var.services_vm
  inside = [incus_exec.stop_jellyfin, incus_exec.stop_frigate, incus_exec.export_jellyfin, incus_exec.export_frigate, incus_exec.stop_samba, incus_exec.samba_users, incus_file.samba_users]
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
  disks = [incus_instance.talos, incus_volume.bulk, incus_instance.rehearsal, incus_volume.talos_iso]
  # What passes the iGPU through, or checks it.
  gpu = [incus_instance.rehearsal, talos_read.rehearsal_igpu, incus_instance.talos]
}

role "node" {
  vm      = incus_instance.talos
  cpu     = var.node_cpu
  memory  = var.node_memory
  mac     = var.node_mac
  address = var.node_address
  talos   = var.talos_version
}

role "rehearsal" {
  vm         = incus_instance.rehearsal
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
