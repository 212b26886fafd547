// Command migrate-provider-helm is the helm provider as a plugin program:
// migrate starts it when a runbook uses the provider, and speaks to it
// over its standard input and output (see providers/plugin). It is not
// meant to be run by hand.
package main

import (
	"os"

	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

func main() { os.Exit(plugin.Serve(helm.TypeName, helm.New())) }
