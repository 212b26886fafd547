variable "port" {
  type    = number
  default = "eighty" # ERROR: Invalid Value for Variable
}

phase "one" {
  step "exec" "a" {
    command = "echo hi" # ERROR: Incorrect attribute value type
    env     = { A = ["x"] } # ERROR: Incorrect attribute value type
  }
  check "http_check" "b" {
    url    = "http://x"
    status = "ok" # ERROR: Incorrect attribute value type
    when   = "during" # ERROR: Invalid Check Timing
  }
  step "exec" "c" {
    command = ["echo", exec.a.exit_code]
    timeout = 5 # ERROR: Invalid Duration
  }
}
