# A migration in miniature, runnable anywhere with only the local provider:
# an "old VM" directory is rehearsed, moved to a "new node" directory, the
# old one is stopped (not deleted), and a final approval gates the cleanup.
#
#   go build -o bin/ ./cmd/migrate
#   bin/migrate run --all --runbook examples/quickstart --state /tmp/migrate-quickstart/state --auto-approve --approve approval.cleanup
#   bin/migrate rollback --runbook examples/quickstart --state /tmp/migrate-quickstart/state --auto-approve
#
# The play lab and the state live under /tmp/migrate-quickstart, out of the
# checkout (--var lab=DIR moves the lab).

variable "lab" {
  type        = string
  default     = "/tmp/migrate-quickstart/lab"
  description = "Directory that plays the home lab (relative paths are taken from the runbook's directory)."
}

variable "admin_token" {
  type        = string
  default     = "quickstart-not-a-secret"
  sensitive   = true
  description = "Shown nowhere: plans, state and logs print (sensitive value)."
}

locals {
  old = "${var.lab}/old-vm"
  new = "${var.lab}/talos-node"
}

phase "platform" {
  description = "Rehearse on a throwaway copy, then build the new node."

  step "exec" "old_vm" {
    command = ["sh", "-c", "mkdir -p ${local.old}/data && echo 'holiday photos' > ${local.old}/data/photos.txt && touch ${local.old}/RUNNING"]
    creates = "${local.old}/data/photos.txt"
  }

  step "exec" "rehearsal" {
    command    = ["sh", "-c", "mkdir -p ${var.lab}/scratch && cp -r ${local.old}/data ${var.lab}/scratch/ && test -s ${var.lab}/scratch/data/photos.txt"]
    revert     = ["rm", "-rf", "${var.lab}/scratch"]
    depends_on = [exec.old_vm]
  }

  step "exec" "node" {
    command    = ["mkdir", "-p", "${local.new}/var/mnt/data"]
    revert     = ["rm", "-rf", local.new]
    depends_on = [exec.rehearsal]
  }
}

phase "data-apps" {
  description = "Move the data and start the applications on the new node."

  step "exec" "copy_data" {
    command = ["cp", "-r", "${local.old}/data/.", "${local.new}/var/mnt/data/"]
    creates = "${local.new}/var/mnt/data/photos.txt"
    revert  = ["rm", "-f", "${local.new}/var/mnt/data/photos.txt"]
  }

  step "exec" "start_apps" {
    command    = ["sh", "-c", "echo \"token=$ADMIN_TOKEN\" > ${local.new}/apps.env && echo apps started"]
    env        = { ADMIN_TOKEN = var.admin_token }
    revert     = ["rm", "-f", "${local.new}/apps.env"]
    depends_on = [exec.copy_data]
  }

  step "wait" "settle" {
    duration   = "200ms"
    depends_on = [exec.start_apps]
  }

  check "exec" "data_visible" {
    command = ["test", "-s", "${local.new}/var/mnt/data/photos.txt"]
  }
}

phase "cleanup" {
  description = "Stop the old VM, keeping it for a way back."

  step "approval" "cleanup" {
    message = "The new node serves the data. Stop the old VM (it is kept, not deleted)?"
  }

  step "exec" "stop_old_vm" {
    command    = ["mv", "${local.old}/RUNNING", "${local.old}/STOPPED"]
    creates    = "${local.old}/STOPPED"
    revert     = ["mv", "${local.old}/STOPPED", "${local.old}/RUNNING"]
    depends_on = [approval.cleanup]
  }
}
