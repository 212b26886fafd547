locals {
  a = var.nope # ERROR: Reference to Undeclared Input Variable
  b = local.nope # ERROR: Reference to Undeclared Local Value
  c = exec.one.exit_code # ERROR: Invalid Reference
}

phase "one" {
  step "exec" "one" {
    command    = ["echo", exec.two.exit_code] # ERROR: Reference to Undeclared Step
    depends_on = [exec.on] # ERROR: Reference to Undeclared Step
  }
  step "exec" "three" {
    command = ["echo", exec.one.stdout] # ERROR: Reference to Undeclared Output
    dir     = wait.w.anything # ERROR: Reference to Undeclared Output
    creates = nothing.here # ERROR: Unknown variable
  }
  step "wait" "w" {
    duration   = var.dur # ERROR: Reference to Undeclared Input Variable
    depends_on = ["exec.one"] # ERROR: Invalid depends_on Reference
  }
}

provider "talos" "n" {
  version = talos_kubeconfig.k.path # ERROR: Reference to Undeclared Step
}
