phase "one" {
  step "exec" "vm" {
    command = ["true"]
  }
  step "exec" "job" {
    command    = ["true"]
    depends_on = [exec.vm]
  }
  step "exec" "unrelated" {
    command = ["true"]
  }
  check "http_check" "up" {
    url = "http://x"
  }
  step "exec" "delete" {
    command    = ["true"]
    depends_on = [exec.job]
    discards = [
      exec.vm,
      exec.unrelated, # ERROR: Invalid discards Entry
      http_check.up,  # ERROR: Invalid discards Entry
      exec.delete,    # ERROR: Invalid discards Entry
      exec.missing,   # ERROR: Reference to Undeclared Step
      exec.vm.exit_code, # ERROR: Invalid discards Reference
    ]
  }
}

phase "two" {
  step "exec" "early" {
    command  = ["true"]
    discards = [exec.later] # ERROR: Invalid discards Entry
  }
}

phase "three" {
  step "exec" "later" {
    command = ["true"]
  }
  step "exec" "fine" {
    command  = ["true"]
    discards = [exec.early, exec.vm]
  }
}
