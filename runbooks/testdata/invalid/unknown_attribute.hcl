phase "one" {
  descripton = "typo" # ERROR: Unsupported argument
  step "exec" "a" {
    command = ["true"]
    comand  = ["true"] # ERROR: Unsupported argument
  }
  step "wait" "b" {
    duration = "1s"
    when     = "before" # ERROR: Unsupported argument
  }
  check "http_check" "c" {
    url = "http://x"
    retry {
      attempts = 2
      delay    = "1s" # ERROR: Unsupported argument
    }
  }
}

variable "x" {
  default = 1
  typ     = number # ERROR: Unsupported argument
}
