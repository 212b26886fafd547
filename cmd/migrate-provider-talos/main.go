// Command migrate-provider-talos is the talos provider as a plugin program:
// migrate starts it when a runbook uses the provider, and speaks to it
// over its standard input and output (see providers/plugin). It is not
// meant to be run by hand. Run as "migrate-provider-talos gen-secrets
// [VERSION]" it writes a new secrets bundle to its output, for migrate
// secrets gen talos, which encrypts it.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == talosschema.GenSecretsArg {
		version := ""
		if len(os.Args) > 2 {
			version = os.Args[2]
		}
		if err := talos.GenSecrets(os.Stdout, version); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == talosschema.GenTalosconfigArg {
		bundle, err := io.ReadAll(os.Stdin)
		if err == nil {
			err = talos.GenTalosconfig(os.Stdout, bundle, os.Args[2])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(plugin.Serve(talos.TypeName, talos.New()))
}
