provider "talos" "a" { # ERROR: Missing required argument
}

provider "talos" "b" {
  version = "v1.13.3"
  color   = "blue" # ERROR: Unsupported argument
}

provider "talos" "b" { # ERROR: Duplicate Provider Configuration
  version = "v1.13.3"
}

phase "one" {
  step "talos_kubeconfig" "k" { # ERROR: Ambiguous Provider
  }
  step "talos_kubeconfig" "l" {
    provider = talos.c # ERROR: Reference to Undeclared Provider
  }
  step "exec" "m" {
    provider = talos.a # ERROR: Invalid Provider Reference
    command  = ["true"]
  }
  step "exec" "n" {
    provider = local.default
    command  = ["true"]
  }
}
