package talosnode

import (
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// UserInput is what a user generates before meeting a node in maintenance
// mode, as talosctl gen secrets / gen config do: a fresh secrets bundle
// (in.Options.SecretsBundle) and the generate input of that bundle for
// cluster, with DefaultVersion's contract and Kubernetes, and the endpoint
// https://127.0.0.1:6443; opts add to those.
func UserInput(cluster string, opts ...generate.Option) (*generate.Input, error) {
	contract, err := talosconfig.ParseContractFromVersion(DefaultVersion)
	if err != nil {
		return nil, err
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		return nil, err
	}

	return generate.NewInput(cluster, "https://127.0.0.1:6443", KubernetesVersionOf(DefaultVersion),
		append([]generate.Option{generate.WithVersionContract(contract), generate.WithSecretsBundle(bundle)}, opts...)...)
}
