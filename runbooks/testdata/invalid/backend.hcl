variable "etcd_password" {
  default   = "hunter2-canary"
  sensitive = true
}

backend "etcd" {
  endpoints = ["127.0.0.1:2379"]
  prefix    = "migrate/test/"
  username  = "migrate"
  password  = var.etcd_password
  lock_ttl  = "soon" # ERROR: Invalid Duration
  cert      = "client.pem" # ERROR: Incomplete Client Certificate
}

backend "etcd" { # ERROR: Duplicate Backend Block
  endpoints = []   # ERROR: Invalid Backend Endpoints
  prefix    = exec.a.exit_code # ERROR: Invalid Reference
  lock_ttl  = "10ms" # ERROR: Invalid Duration
  password  = "x" # ERROR: Password Without Username
  key       = "k.pem" # ERROR: Incomplete Client Certificate
  ca        = var.etcd_password # ERROR: Sensitive Value in the Backend
  colour    = "blue" # ERROR: Unsupported argument
}

backend "consul" { # ERROR: Duplicate Backend Block | Unknown Backend Type
}

phase "one" {
  step "exec" "a" {
    command = ["true"]
  }
}
