variable "greeting" {
  default = "hello"
}

locals {
  message = templatefile("files/motd.tmpl", { greeting = var.greeting, names = ["ann", "bob"] })
  config  = jsondecode(file("files/config.json"))
  script  = abspath("files/run.sh")
}
