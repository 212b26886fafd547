// Command genschema writes the schema a plugin provider derives from its
// step types to the file its light schema package embeds, which is how
// migrate knows the schema without linking the provider (see
// providers/sdk, EncodeSchema). It runs from go generate in the
// provider's directory:
//
//	//go:generate go run ../internal/genschema helm helmschema/schema.json
package main

import (
	"fmt"
	"os"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// schemas are the plugin providers' derived schemas by type name.
var schemas = map[string]func() phases.Schema{
	helm.TypeName:  func() phases.Schema { return helm.New().Schema() },
	talos.TypeName: func() phases.Schema { return talos.New().Schema() },
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: genschema PROVIDER FILE")
		os.Exit(2)
	}
	schema, ok := schemas[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "genschema: no plugin provider %q\n", os.Args[1])
		os.Exit(2)
	}
	b, err := sdk.EncodeSchema(schema())
	if err == nil {
		err = os.WriteFile(os.Args[2], b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "genschema: %v\n", err)
		os.Exit(1)
	}
}
