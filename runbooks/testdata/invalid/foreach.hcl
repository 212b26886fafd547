variable "apps" {
  default = { a = "1", b = "2" }
}

phase "p" {
  step "exec" "src" {
    command = ["true"]
  }
  step "exec" "from_output" {
    for_each = toset([exec.src.exit_code]) # ERROR: Invalid for_each Argument
    command  = ["true"]
  }
  step "exec" "list" {
    for_each = ["a", "b"] # ERROR: Invalid for_each Argument
    command  = ["true"]
  }
  step "exec" "empty" {
    for_each = { "" = 1 } # ERROR: Invalid for_each Key
    command  = ["true"]
  }
  step "exec" "apps" {
    for_each = var.apps
    command  = [each.key, each.value, each.other] # ERROR: Invalid Reference to each
  }
  step "exec" "plain" {
    command    = [each.key] # ERROR: Invalid Reference to each
    depends_on = [exec.apps["c"]] # ERROR: Reference to Undeclared Instance
  }
  step "exec" "nokey" {
    command = ["${exec.apps.exit_code}"] # ERROR: Missing Instance Key
  }
  step "exec" "badkey" {
    command = ["${exec.apps["z"].exit_code}"] # ERROR: Reference to Undeclared Instance
  }
  step "exec" "keyed_plain" {
    depends_on = [exec.src["a"]] # ERROR: Reference to Undeclared Instance
    command    = ["true"]
  }
}

phase "q" {
  step "exec" "objects" {
    for_each = { a = { dir = "/a" } }
    command  = each.value # ERROR: Incorrect attribute value type
  }
}
