// Command migrate-provider-talos is the talos provider as a plugin program:
// migrate starts it when a runbook uses the provider, and speaks to it
// over its standard input and output (see providers/plugin). It is not
// meant to be run by hand. Run as "migrate-provider-talos gen-secrets
// [VERSION]" it writes a new secrets bundle to its output, for migrate
// secrets gen talos, which encrypts it; as "gen-talosconfig CONTEXT",
// the admin talosconfig of the bundle on its input. Both first introduce
// the program as its provider calls do (plugin.ServeCommand), so that
// migrate checks the program before it trusts what it makes.
package main

import (
	"io"
	"os"

	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

func main() {
	p := talos.New()
	switch {
	case len(os.Args) > 1 && os.Args[1] == talosschema.GenSecretsArg:
		version := ""
		if len(os.Args) > 2 {
			version = os.Args[2]
		}
		os.Exit(plugin.ServeCommand(talos.TypeName, p.Schema(), func(_ io.Reader, out io.Writer) error {
			return talos.GenSecrets(out, version)
		}))
	case len(os.Args) > 3 && os.Args[1] == talosschema.UpgradePatchArg:
		os.Exit(plugin.ServeCommand(talos.TypeName, p.Schema(), func(in io.Reader, out io.Writer) error {
			patch, err := io.ReadAll(in)
			if err != nil {
				return err
			}
			return talos.UpgradePatch(out, patch, os.Args[2], os.Args[3])
		}))
	case len(os.Args) > 2 && os.Args[1] == talosschema.GenTalosconfigArg:
		os.Exit(plugin.ServeCommand(talos.TypeName, p.Schema(), func(in io.Reader, out io.Writer) error {
			bundle, err := io.ReadAll(in)
			if err != nil {
				return err
			}
			return talos.GenTalosconfig(out, bundle, os.Args[2])
		}))
	}
	os.Exit(plugin.Serve(talos.TypeName, p))
}
