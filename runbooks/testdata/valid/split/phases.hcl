phase "one" {
  step "exec" "hello" {
    command = ["echo", local.message]
    env     = { HOME_DIR = env("HOME"), PORT = tostring(local.config.port) }
  }
}

phase "two" {
  step "exec" "run" {
    command = ["sh", local.script, exec.hello.exit_code == 0 ? "ok" : "failed"]
    dir     = dirname(local.script)
  }
}
