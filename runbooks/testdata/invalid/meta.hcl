phase "one" {
  step "exec" "a" {
    command = ["true"]
    timeout = "5 minutes" # ERROR: Invalid Duration
    retry {
      attempts = 0 # ERROR: Invalid Retry Attempts
      backoff  = "soon" # ERROR: Invalid Duration
    }
    retry { # ERROR: Duplicate Retry Block
    }
  }
  step "exec" { # ERROR: Missing name for step
    command = ["true"]
  }
  step "exec" "b" { # ERROR: Missing required argument
  }
  check "exec" "c" { # ERROR: Step Type Cannot Be a Check
    command = ["true"]
  }
  step "talos_read" "d" { # ERROR: Step Type Only Valid in Check | Missing Provider Configuration
    path = "/x"
  }
  step "exec" "bad name" { # ERROR: Invalid Step Name
    command = ["true"]
  }
}
