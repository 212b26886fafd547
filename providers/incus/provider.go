package incus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
	"github.com/homelab-migrate/migrate/secret"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "incus"

// Config keys that migrate keeps on instances it touches, so that the
// marks survive a lost state file and any process can see them.
const (
	// KeyKeepForRollback marks an instance stopped by migrate and kept so
	// that rollback can start it again; the cleanup guard refuses to
	// delete it before retain_until.
	KeyKeepForRollback = "user.migrate.keep_for_rollback"
	// KeyStoppedAt is when migrate stopped it (RFC 3339).
	KeyStoppedAt = "user.migrate.stopped_at"
	// KeyStoppedBy is the address of the step that stopped it.
	KeyStoppedBy = "user.migrate.stopped_by"
	// KeySnapshot is the snapshot taken just before that stop.
	KeySnapshot = "user.migrate.snapshot"
	// KeyAutostartBefore is the instance's boot.autostart before migrate
	// stopped it ("true", "false", or "unset"): a stopped old VM must not
	// come back at the host's next boot, beside the machine that replaced
	// it, and rollback puts the setting back.
	KeyAutostartBefore = "user.migrate.autostart_before"
	// KeyCreatedBy is the address of the step that created the instance.
	KeyCreatedBy = "user.migrate.created_by"
)

// Provider manages instances on one Incus daemon. It is safe for
// concurrent use once configured; the SDK does the envelope of every call.
type Provider = sdk.Provider[*conn]

// New returns an unconfigured Incus provider.
func New() *Provider {
	var mu sync.Mutex
	var last *conn // the last one configured, closed by Close
	return &sdk.Provider[*conn]{
		Name:     TypeName,
		Settings: block{},
		ConfigureFunc: func(_ context.Context, req providers.ConfigureRequest) (*conn, phases.Diagnostics) {
			cn, diags := connect(req)
			if cn != nil {
				mu.Lock()
				last = cn
				mu.Unlock()
			}
			return cn, diags
		},
		CloseFunc: func() error {
			mu.Lock()
			defer mu.Unlock()
			if last != nil {
				last.c.Close() // drops idle connections
			}
			return nil
		},
		Steps: []sdk.Step[*conn]{instanceStep, stateStep, snapshotStep, volumeStep, execStep, fileStep, syncStep, deviceStep},
		Scrub: func(*conn) *secret.Scrubber { return &secret.Scrubber{Min: minSecret} },
	}
}

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

// minSecret is the shortest string worth scrubbing from free text; shorter
// sensitive values are kept out of text by the renderers themselves.
const minSecret = 4

// conn is what Configure makes of the provider block: the client and
// where it points, for messages.
type conn struct {
	*settings
	c *incusapi.Client

	// down is the daemon found unreachable, by which step and when: the
	// steps after it say so in one line pointing at it, instead of each
	// repeating the whole error (a plan of twenty instances while incusd
	// is stopped).
	mu   sync.Mutex
	down *outage
}

type outage struct {
	first phases.Address
	at    time.Time
}

// downFor is how long an unreachable daemon is told in one line by the
// other steps; every failure renews it.
const downFor = 10 * time.Second

// unreachable is the diagnostic of a step that could not reach the daemon.
func (cn *conn) unreachable(addr phases.Address, err error) phases.Diagnostics {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	now := time.Now()
	if d := cn.down; d != nil && d.first != addr && now.Sub(d.at) < downFor {
		d.at = now
		return phases.Errorf("Incus Unreachable", "%s: the Incus daemon at %s did not answer (see %s).", addr, cn.where, d.first)
	}
	cn.down = &outage{first: addr, at: now}
	return phases.Errorf("Incus Unreachable", "%s cannot reach the Incus daemon at %s: %v.", addr, cn.where, err)
}

// connect reads the provider block and builds the client; it does not
// connect yet.
func connect(req providers.ConfigureRequest) (*conn, phases.Diagnostics) {
	s, diags := configure(req)
	if diags.HasErrors() {
		return nil, diags
	}
	c, err := incusapi.New(s.opts)
	if err != nil {
		return nil, phases.Errorf("Invalid Incus Connection Settings", "The incus provider %q cannot be set up: %v.", req.Name, err)
	}
	return &conn{settings: s, c: c}, diags
}

// call is what every handler gets.
type call = sdk.Call[*conn]

// logf writes a line to the step's log (the SDK scrubs it).
func logf(c *call, format string, args ...any) { c.Log.Printf(format, args...) }

// apiErr turns a client error into a diagnostic a person can act on.
func apiErr(c *call, summary string, err error) phases.Diagnostics {
	var unreachable *incusapi.UnreachableError
	var untrusted *incusapi.UntrustedError
	var badCert *incusapi.ServerCertError
	s := c.Settings
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return phases.Errorf("Step Interrupted", "%s was stopped before it finished (%v). The daemon may still complete an operation already sent; the next run reads the instance first and goes on from there.", c.Addr, err)
	case errors.As(err, &unreachable):
		return s.unreachable(c.Addr, err)
	case errors.As(err, &untrusted):
		how := "incus config trust add-certificate CERT --name migrate"
		if s.clientCert != "" {
			how = fmt.Sprintf("incus config trust add-certificate %s --name migrate", s.clientCert)
		}
		return phases.Errorf("Client Certificate Not Trusted", "The Incus server at %s does not trust migrate's client certificate: %v. Trust it once on the server (over its unix socket): `%s`; or create a token there with `incus config trust add migrate` and add the remote with `incus remote add NAME ADDRESS --token TOKEN`.", s.where, err, how)
	case errors.As(err, &badCert):
		return phases.Errorf("Server Certificate Mismatch", "%v.", err)
	case errors.Is(err, incusapi.ErrConflict):
		return phases.Errorf("Concurrent Change", "%s: the instance changed after the plan read it (its ETag differs), so the change was not applied rather than overwrite someone else's: %v. Make a new plan to see the current state.", c.Addr, err)
	}
	return phases.Errorf(summary, "%s: %v.", c.Addr, strings.TrimSuffix(err.Error(), "."))
}

// errorf is one error diagnostic.
var errorf = phases.Errorf

// warning is one warning diagnostic.
func warning(summary, format string, args ...any) phases.Diagnostics {
	return phases.Diagnostics{{Severity: phases.Warning, Summary: summary, Detail: fmt.Sprintf(format, args...)}}
}

// pick returns the value kept in revert data unless it was redacted there
// (a sensitive value), in which case the step's configuration has it.
func pick(kept, fromConfig string) string {
	if kept == "" || strings.Contains(kept, phases.Redacted) {
		return fromConfig
	}
	return kept
}

// show prints a value for a diff: quoted, or redacted when sensitive.
func show(v string, sensitive bool) string {
	if sensitive {
		return phases.Redacted
	}
	return fmt.Sprintf("%q", v)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
