phase "first" {
  step "exec" "early" {
    command = ["echo", exec.late.exit_code] # ERROR: Dependency Runs Backwards
  }
  check "http_check" "gate" {
    url        = "http://x"
    when       = "before"
    depends_on = [exec.early] # ERROR: Check Depends on Later Step
  }
  check "http_check" "done" {
    url = "http://x"
  }
  step "exec" "mid" {
    command    = ["true"]
    depends_on = [http_check.done] # ERROR: Step Depends on Later Check
  }
}

phase "second" {
  step "exec" "late" {
    command = ["true"]
  }
}

phase "side" {
  after = [phase.first]
  step "exec" "side" {
    command    = ["true"]
    depends_on = [exec.late] # ERROR: Dependency on Unordered Phase
  }
}

phase "third" {
  after = [phase.second, phase.secnd, "first"] # ERROR: Reference to Undeclared Phase | Invalid Phase Reference
}

phase "loop-a" {
  after = [phase.loop-b] # ERROR: Phase Order Cycle
}

phase "loop-b" {
}
