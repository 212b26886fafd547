locals {
  x = local.y
  y = "${local.x}!" # ERROR: Dependency Cycle
}

phase "one" {
  step "exec" "a" {
    command    = ["true"]
    depends_on = [exec.b] # ERROR: Dependency Cycle
  }
  step "exec" "b" {
    command = ["echo", exec.a.exit_code]
  }
  step "exec" "self" {
    command = ["echo", exec.self.exit_code] # ERROR: Dependency Cycle
  }
  step "exec" "c" {
    command = ["echo", exec.d.exit_code] # ERROR: Dependency Cycle
  }
  step "exec" "d" {
    command = ["echo", exec.e.exit_code]
  }
  step "exec" "e" {
    command = ["echo", exec.c.exit_code, exec.a.exit_code]
  }
}
