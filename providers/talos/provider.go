package talos

import (
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
	"github.com/homelab-migrate/migrate/secret"
)

// TypeName is the provider type (and the name its plugin program serves).
const TypeName = talosschema.TypeName

// Step type names.
const (
	MachineConfig = talosschema.MachineConfig
	Bootstrap     = talosschema.Bootstrap
	Kubeconfig    = talosschema.Kubeconfig
	Read          = talosschema.Read
	ServiceHealth = talosschema.ServiceHealth
	Upgrade       = talosschema.Upgrade
)

// Provider talks to Talos nodes through their machine API. It is safe for
// concurrent use once configured. The SDK does the envelope of every
// call; the provider itself is the settings its handlers get.
type Provider struct {
	*sdk.Provider[*Provider]
	s *settings // set by Configure

	mu     sync.Mutex
	client *client.Client
	reach  reach // the endpoints' last answers (reach.go)
}

// New returns an unconfigured Talos provider.
func New() *Provider {
	p := &Provider{}
	p.Provider = &sdk.Provider[*Provider]{
		Name:          TypeName,
		Settings:      talosschema.ProviderAttrs{},
		ConfigureFunc: p.configure,
		CloseFunc:     p.close,
		Steps:         []sdk.Step[*Provider]{machineConfigStep, bootstrapStep, kubeconfigStep, readStep, serviceHealthStep, upgradeStep},
		// Every call scrubs the secrets loaded with the provider block
		// besides the step's own, and blanks secret fields of YAML.
		Scrub: func(p *Provider) *secret.Scrubber {
			s := newScrubber()
			if p != nil && p.s != nil {
				s.Merge(p.s.scrub)
			}
			return s
		},
	}
	return p
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

// close closes the connection to the nodes.
func (p *Provider) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		return nil
	}
	err := p.client.Close()
	p.client = nil
	return err
}

// handle is what the SDK gives every handler.
type handle = sdk.Call[*Provider]

// call is one call of a handler: the SDK's, with the provider's settings
// and the helpers every step type uses at hand.
type call struct {
	*sdk.Call[*Provider]
	p    *Provider
	s    *settings
	log  *secret.Writer
	addr phases.Address
}

func newCall(c *handle) *call {
	return &call{Call: c, p: c.Settings, s: c.Settings.s, log: c.Log, addr: c.Addr}
}

// none is the private or inverse data of step types that keep none.
type none = struct{}

// nothingToUndo is the inverse of checks.
func nothingToUndo() *sdk.Inverse[none] { return &sdk.Inverse[none]{Description: "nothing to undo"} }
