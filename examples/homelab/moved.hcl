# Where the steps written out before groups/ are now: a state made by that
# runbook carries over, nothing run again. (migrate init's runbooks start
# without history, and without this file.)

moved {
  from = incus_exec.stop_jellyfin
  to   = group.jellyfin.incus_exec.stop
}

moved {
  from = incus_exec.export_jellyfin
  to   = group.jellyfin.incus_exec.export
}

moved {
  from = helm_release.jellyfin
  to   = group.jellyfin.helm_release.app
}

moved {
  from = http_check.jellyfin_health
  to   = group.jellyfin.http_check.health
}

moved {
  from = incus_exec.stop_frigate
  to   = group.frigate.incus_exec.stop
}

moved {
  from = incus_exec.export_frigate
  to   = group.frigate.incus_exec.export
}

moved {
  from = helm_release.frigate
  to   = group.frigate.helm_release.app
}

moved {
  from = http_check.frigate_health
  to   = group.frigate.http_check.health
}

moved {
  from = talos_machine_config.rehearsal
  to   = group.rehearsal.talos_machine_config.config
}

moved {
  from = incus_instance.rehearsal
  to   = group.rehearsal.incus_instance.vm
}

moved {
  from = talos_service_health.rehearsal_installed
  to   = group.rehearsal.talos_service_health.installed
}

moved {
  from = incus_device.rehearsal_config_cleared
  to   = group.rehearsal.incus_device.config_cleared
}

moved {
  from = talos_bootstrap.rehearsal
  to   = group.rehearsal.talos_bootstrap.etcd
}

moved {
  from = talos_kubeconfig.rehearsal
  to   = group.rehearsal.talos_kubeconfig.admin
}

moved {
  from = kubernetes_ready.rehearsal
  to   = group.rehearsal.kubernetes_ready.node
}

moved {
  from = talos_machine_config.node
  to   = group.node.talos_machine_config.config
}

moved {
  from = incus_instance.talos
  to   = group.node.incus_instance.vm
}

moved {
  from = talos_service_health.node_installed
  to   = group.node.talos_service_health.installed
}

moved {
  from = incus_device.talos_config_cleared
  to   = group.node.incus_device.config_cleared
}

moved {
  from = talos_bootstrap.etcd
  to   = group.node.talos_bootstrap.etcd
}

moved {
  from = talos_kubeconfig.admin
  to   = group.node.talos_kubeconfig.admin
}

moved {
  from = kubernetes_ready.node
  to   = group.node.kubernetes_ready.node
}
