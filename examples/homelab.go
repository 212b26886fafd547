package examples

import (
	"embed"
	"io/fs"
)

// The tracked files of examples/homelab (the test compares them with
// git's list): all: keeps the charts' _helpers.tpl.
//
//go:embed homelab/main.hcl homelab/moved.hcl homelab/secrets.auto.hcl.age homelab/.age-recipients
//go:embed all:homelab/charts homelab/manifests homelab/patches homelab/scripts homelab/groups
//go:embed homelab/secrets/README.md homelab/secrets/demo-identity.txt homelab/secrets/*.age
var homelab embed.FS

// Homelab is examples/homelab, rooted at the runbook's directory.
func Homelab() fs.FS {
	sub, err := fs.Sub(homelab, "homelab")
	if err != nil {
		panic(err) // a constant path: cannot fail
	}
	return sub
}
