// Package homelab carries examples/homelab's runbook without its secrets
// (main.hcl, the charts, manifests and patches): the template `migrate
// init` writes a new runbook from (package scaffold). The demo's secrets
// and its published identity are package examples' alone, for
// migrate-lab: the product links none of them.
package homelab

import (
	"embed"
	"io/fs"
)

// all: keeps the charts' _helpers.tpl.
//
//go:embed main.hcl all:charts manifests patches scripts groups
var runbook embed.FS

// Runbook is the runbook's files, rooted at its directory.
func Runbook() fs.FS { return runbook }
