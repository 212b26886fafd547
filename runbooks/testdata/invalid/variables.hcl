variable "required" { # ERROR: Missing Required Variable
  type = string
}

variable "port" {
  type    = number
  default = 80 # ERROR: Invalid Value for Variable
  validation {
    condition     = var.port > 1024
    error_message = "The port must be above 1024."
  }
}

variable "weird" {
  type    = lisst(string) # ERROR: Invalid type specification
  default = []
}

variable "bad name" { # ERROR: Invalid Variable Name
  default = 1
}

variable "calc" {
  default = var.port # ERROR: Variables not allowed
}
