variable "apps" {
  default = { nextcloud = "/srv/nc", jellyfin = "/srv/jf" }
}

phase "apps" {
  step "exec" "export" {
    for_each = var.apps
    command  = ["tar", "-C", each.value, "-cf", "${each.key}.tar", "."]
    revert   = ["rm", "-f", "${each.key}.tar"]
  }
  step "exec" "restore" {
    for_each   = toset(keys(var.apps))
    command    = ["echo", each.key, "${exec.export[each.key].exit_code}"]
    depends_on = [exec.export["nextcloud"]]
  }
}
