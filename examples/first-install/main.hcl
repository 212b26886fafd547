# From a node booted from the Talos ISO (maintenance mode) to a cluster and
# its kubeconfig in ONE run: the first install, the bootstrap, the
# kubeconfig. The lab's Talos node stands in for the VM (see
# lab/talosnode/doc.go); start it in maintenance mode in lab/node (it
# writes the address it serves on to its "ready" file):
#
#   make build
#   mkdir -p /tmp/first-install
#   talosctl gen secrets -o /tmp/first-install/secrets.yaml   # your own bundle
#   talosctl gen config lab https://127.0.0.1:6443 --with-secrets /tmp/first-install/secrets.yaml \
#       --output-types talosconfig -o /tmp/first-install/talosconfig
#   bin/talos-lab --maintenance --dir /tmp/first-install/node \
#       --disk name=/dev/sda,size=32GiB --disk name=/dev/sdb,size=150GiB &
#   bin/migrate plan --runbook examples/first-install --state /tmp/first-install/state --var lab=/tmp/first-install
#   bin/migrate run --all --runbook examples/first-install --state /tmp/first-install/state --var lab=/tmp/first-install --auto-approve
#
# The node's address is an output of a step of this run, so the provider
# is configured only when its first step runs: `plan` before that shows
# the Talos steps deferred, "(known after exec.node)". On a real machine
# the step before would be the VM's creation (incus_instance.talos.ipv4).

variable "lab" {
  type        = string
  description = "Directory of your secrets bundle and talosconfig, and node/, the talos-lab --dir; the kubeconfig is written to its rendered/."
}

phase "platform" {
  description = "Wait for the node booted from the ISO, install Talos, bootstrap, kubeconfig."

  # The node is up when its address is known (a VM's DHCP lease; here the
  # lab node's ready file).
  step "exec" "node" {
    command = ["sh", "-c", "until [ -s \"$LAB/node/ready\" ]; do sleep 0.2; done"]
    env     = { LAB = var.lab }
    timeout = "2m"
  }

  step "talos_machine_config" "node" {
    patches  = ["patches/node.yaml"]
    rendered = "${var.lab}/rendered/controlplane.yaml"
    verify = {
      services = ["apid", "machined"]
    }
  }

  step "talos_bootstrap" "etcd" {
    depends_on = [talos_machine_config.node]
  }

  step "talos_kubeconfig" "admin" {
    path       = "${var.lab}/rendered/kubeconfig"
    depends_on = [talos_bootstrap.etcd]
  }
}

provider "talos" "node" {
  # Known only once exec.node has run: the first install goes only to the
  # address the runbook names, never to one from the talosconfig.
  endpoints        = [exec.node.exit_code == 0 ? trimspace(file("${var.lab}/node/ready")) : "node-not-up"]
  talosconfig      = "${var.lab}/talosconfig"
  secrets          = "${var.lab}/secrets.yaml"
  version          = "v1.13.3" # pinned: the installer image's tag
  cluster_name     = "lab"
  cluster_endpoint = "https://127.0.0.1:6443"
  install_disk     = "/dev/sda"
}
