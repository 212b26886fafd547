resource "exec" "x" {} # ERROR: Unsupported block type

phase "one" {
  stage "x" {} # ERROR: Unsupported block type
  step "exec" "a" {
    command = ["true"]
    extra { # ERROR: Unsupported block type
    }
  }
  step "exek" "b" { # ERROR: Unknown Step Type
    command = ["true"]
  }
}

provider "tales" "x" {} # ERROR: Unknown Provider Type
