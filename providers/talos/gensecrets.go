package talos

import (
	"fmt"
	"io"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
)

// GenSecrets writes a new secrets bundle for the Talos version (such as
// "v1.13.3"; "" is the version of the machinery the program is built
// with) to w, as talosctl gen secrets does.
func GenSecrets(w io.Writer, version string) error {
	var contract *talosconfig.VersionContract // nil: the current version
	if version != "" {
		c, err := talosconfig.ParseContractFromVersion(version)
		if err != nil {
			return fmt.Errorf("talos version %q: %w", version, err)
		}
		contract = c
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		return err
	}
	b, err := yaml.Marshal(bundle)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
