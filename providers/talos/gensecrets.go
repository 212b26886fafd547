package talos

import (
	"fmt"
	"io"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
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

// GenTalosconfig writes to w the talosconfig of an administrator of the
// cluster whose secrets bundle is bundleYAML, as talosctl gen config
// does: a client certificate with the os:admin role, signed by the
// bundle's Talos API CA, in a context of that name with no endpoints
// (the talos provider block gives them).
func GenTalosconfig(w io.Writer, bundleYAML []byte, context string) error {
	var bundle secrets.Bundle
	if err := yaml.Unmarshal(bundleYAML, &bundle); err != nil {
		return fmt.Errorf("reading the secrets bundle: %w", err)
	}
	if bundle.Certs == nil || bundle.Certs.OS == nil {
		return fmt.Errorf("the secrets bundle has no Talos API CA (certs.os)")
	}
	bundle.Clock = secrets.NewClock()
	cert, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		return fmt.Errorf("making the admin certificate: %w", err)
	}
	b, err := clientconfig.NewConfig(context, nil, bundle.Certs.OS.Crt, cert).Bytes()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
