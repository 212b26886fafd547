variable "v" { default = 0 }
variable "v" {} # ERROR: Duplicate Variable

locals {
  a = 1
}
locals {
  a = 2 # ERROR: Duplicate Local Value
}

phase "one" {
  step "exec" "a" {
    command = ["true"]
  }
  step "http_check" "h" {
    url = "http://x"
  }
  check "http_check" "h" { # ERROR: Duplicate Step Address
    url = "http://x"
  }
}

phase "two" {
  step "exec" "a" { # ERROR: Duplicate Step Address
    command = ["true"]
  }
  step "wait" "a" {
    duration = "1s"
  }
}

phase "one" { # ERROR: Duplicate Phase
}

variable "needed" { # ERROR: Missing Required Variable
}
