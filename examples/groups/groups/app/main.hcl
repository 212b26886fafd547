variable "app" {
  description = "The app's name."
}

variable "data" {
  description = "What its data is called."
}

variable "root" {
  description = "The scratch directory of the old and the new host."
}

locals {
  old = "${var.root}/old/${var.app}"
  new = "${var.root}/new/${var.app}"
}

step "exec" "seed" {
  command = ["sh", "-c", "mkdir -p \"$1\" && echo \"$2\" > \"$1/data\"", "seed", local.old, var.data]
  creates = "${local.old}/data"
  revert  = ["rm", "-rf", local.old]
}

step "exec" "copy" {
  command    = ["cp", "-R", local.old, local.new]
  creates    = local.new
  revert     = ["rm", "-rf", local.new]
  depends_on = [exec.seed]
}

output "path" {
  value = local.new
}
