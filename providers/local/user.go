package local

import (
	"os"
	"os/user"
	"sync"
)

// localUser is user@host of the person at this terminal, for the approval
// record.
var localUser = sync.OnceValue(func() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
})
