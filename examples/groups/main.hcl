# One group, called once per app: the same three steps for each, written
# once. `migrate plan` shows them as group.app["KEY"].exec.STEP.
variable "out" {
  description = "Where the play apps live (a scratch directory)."
}

variable "apps" {
  type = map(string)
  default = {
    jellyfin = "media"
    frigate  = "cameras"
    samba    = "files"
  }
}

phase "apps" {
  step "exec" "prepare" {
    command = ["mkdir", "-p", "${var.out}/old", "${var.out}/new"]
    revert  = ["rm", "-rf", var.out]
  }

  group "app" {
    source     = "./groups/app"
    for_each   = var.apps
    app        = each.key
    data       = each.value
    root       = var.out
    depends_on = [exec.prepare]
  }

  step "exec" "report" {
    command    = ["sh", "-c", "ls \"$1\" > \"$1/../moved.txt\"", "report", "${var.out}/new"]
    revert     = ["rm", "-f", "${var.out}/moved.txt"]
    depends_on = [group.app]
  }
}

# The apps' steps were once written out one by one; their records follow
# them into the group.
moved {
  from = exec.copy_jellyfin
  to   = group.app["jellyfin"].exec.copy
}
