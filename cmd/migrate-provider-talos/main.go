// Command migrate-provider-talos is the talos provider as a plugin program:
// migrate starts it when a runbook uses the provider, and speaks to it
// over its standard input and output (see providers/plugin). It is not
// meant to be run by hand.
package main

import (
	"os"

	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos"
)

func main() { os.Exit(plugin.Serve(talos.TypeName, talos.New())) }
