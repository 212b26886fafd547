package providertest

import (
	"os"

	"golang.org/x/sys/unix"
)

// StderrEnv names the file a provider program run by a test appends its
// standard error to (RedirectStderr), so that a canary can read what
// the program printed there: a plugin's stderr reaches the user's
// terminal through migrate's.
const StderrEnv = "MIGRATE_TEST_PLUGIN_STDERR"

// RedirectStderr points this process's standard error (file descriptor
// 2, where a panic goes too) at the file StderrEnv names, when it names
// one. A test binary serving as a provider program calls it first.
func RedirectStderr() error {
	path := os.Getenv(StderrEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Dup2(int(f.Fd()), 2)
}
