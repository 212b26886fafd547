package local

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TypeName is the provider type under which cmd/migrate registers New.
const TypeName = "local"

// Step type names.
const (
	Exec      = "exec"
	HTTPCheck = "http_check"
	// SMBCheck: smb.go.
	Approval = "approval"
	Wait     = "wait"
)

// Provider runs steps on the local machine. It is safe for concurrent use.
// The SDK does the envelope of every call; the provider itself is the
// settings its handlers get.
type Provider struct {
	*sdk.Provider[*Provider]

	dir string // the runbook directory, set by Configure

	// noPIDNS is set once making a PID namespace failed for lack of
	// privilege; commands then run in their own process group.
	noPIDNS atomic.Bool
	nsMu    sync.Mutex
	ns      *runNamespace // every command runs in it (Linux)

	httpOnce sync.Once
	http     atomic.Pointer[httpClients]
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// New returns an unconfigured local provider.
func New() *Provider {
	p := &Provider{}
	p.Provider = &sdk.Provider[*Provider]{
		Name:          TypeName,
		ConfigureFunc: p.configure,
		CloseFunc:     p.close,
		Steps:         []sdk.Step[*Provider]{execStep, httpStep, smbStep, approvalStep, waitStep},
	}
	return p
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

// configure records the runbook directory; the provider block has no
// attributes.
func (p *Provider) configure(_ context.Context, req providers.ConfigureRequest) (*Provider, phases.Diagnostics) {
	dir := req.Dir
	if dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	p.dir = dir
	return p, nil
}

// close releases idle HTTP connections and the PID namespace.
func (p *Provider) close() error {
	if c := p.http.Load(); c != nil {
		c.close()
	}
	p.nsMu.Lock()
	if p.ns != nil {
		p.ns.close() // and whatever commands left in it
		p.ns = nil
	}
	p.nsMu.Unlock()
	return nil
}

// call is what every handler of the provider gets.
type call = sdk.Call[*Provider]

// none is the private data of step types that keep none.
type none = struct{}

// nothingToUndo is the revert data of steps without a lasting effect.
func nothingToUndo() *sdk.RevertData[none] {
	return &sdk.RevertData[none]{Description: "nothing to undo"}
}
