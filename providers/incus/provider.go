package incus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "incus"

// Step type names.
const (
	Instance      = "incus_instance"
	InstanceState = "incus_instance_state"
	Snapshot      = "incus_snapshot"
)

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
	// KeyCreatedBy is the address of the step that created the instance.
	KeyCreatedBy = "user.migrate.created_by"
)

// Provider manages instances on one Incus daemon. It is safe for
// concurrent use once configured.
type Provider struct {
	s      *settings
	sDiags phases.Diagnostics

	mu     sync.Mutex
	client *incusapi.Client
}

var (
	_ providers.Interface = (*Provider)(nil)
	_ providers.Reverter  = (*Provider)(nil)
	_ providers.Closer    = (*Provider)(nil)
)

// New returns an unconfigured Incus provider.
func New() *Provider { return &Provider{} }

// Factory is New as a providers.Factory.
func Factory() providers.Interface { return New() }

var schema = phases.Schema{
	Provider: phases.Block{Attributes: map[string]phases.Attribute{
		"remote":      {Type: cty.String, Description: "A remote of the incus CLI's configuration (config.yml, servercerts/, client.crt/key in config_dir), such as \"myhost\"; \"local\" is the unix socket."},
		"config_dir":  {Type: cty.String, Description: "The incus CLI's configuration directory, ~/.config/incus by default."},
		"address":     {Type: cty.String, Description: "The daemon's HTTPS URL, such as https://192.168.1.10:8443, instead of a remote."},
		"socket":      {Type: cty.String, Description: "The daemon's unix socket, /var/lib/incus/unix.socket by default."},
		"client_cert": {Type: cty.String, Description: "With address: the client certificate (PEM), relative to the runbook; default config_dir's client.crt."},
		"client_key":  {Type: cty.String, Description: "With address: the client key (PEM), relative to the runbook; default config_dir's client.key."},
		"server_cert": {Type: cty.String, Description: "With address: the server's own certificate (PEM), pinned; without it the system's roots verify the server."},
		"project":     {Type: cty.String, Description: "The Incus project, the daemon's default when unset."},
	}},
	StepTypes: map[string]phases.StepType{
		Instance: {
			Description: "Ensures an Incus instance exists with the given type, image (or empty disk), limits, profiles, config and devices; or, with ensure = \"absent\", that it is deleted (refused for instances kept for rollback before retain_until).",
			Attributes: map[string]phases.Attribute{
				"name":         {Type: cty.String, Description: "The instance name; default the step's name."},
				"ensure":       {Type: cty.String, Description: "\"present\" (default) or \"absent\" (delete it: irreversible)."},
				"type":         {Type: cty.String, Description: "\"virtual-machine\" (default) or \"container\"."},
				"image":        {Type: cty.String, Description: "A local image alias or fingerprint to create it from."},
				"empty":        {Type: cty.Bool, Description: "Create a VM with an empty root disk (to install from an iso device) instead of an image."},
				"cpu":          {Type: cty.Number, Description: "CPUs (limits.cpu)."},
				"memory":       {Type: cty.String, Description: "Memory (limits.memory), such as \"16GiB\"."},
				"profiles":     {Type: cty.List(cty.String), Description: "Profiles, in order; the daemon's default when unset."},
				"config":       {Type: cty.Map(cty.String), Description: "Instance config keys, such as security.secureboot; only the keys listed are managed."},
				"devices":      {Type: cty.Map(cty.Map(cty.String)), Description: "Devices by name, each a map with a type: a host directory shared by virtiofs {type=\"disk\", source=\"/tank/data\", path=\"/var/mnt/data\"} (mount tag incus_NAME), a volume {type=\"disk\", pool=\"default\", source=\"bulk\"}, a GPU {type=\"gpu\", gputype=\"physical\", pci=\"0000:00:02.0\"}, an ISO {type=\"disk\", source=\"/path/talos.iso\", \"boot.priority\"=\"10\"}."},
				"start":        {Type: cty.Bool, Description: "Start the instance once created."},
				"description":  {Type: cty.String, Description: "The instance description, set at creation."},
				"retain_until": {Type: cty.String, Description: "With ensure = \"absent\": the date (YYYY-MM-DD) until which an instance kept for rollback must stay; its deletion is refused until that date has passed."},
			},
			Outputs: map[string]cty.Type{"name": cty.String, "type": cty.String},
		},
		InstanceState: {
			Description: "Stops or starts an instance: gracefully with a timeout (force only when force_after is set), optionally after a snapshot; a stopped instance is kept for rollback, which starts it again.",
			Attributes: map[string]phases.Attribute{
				"instance":            {Type: cty.String, Required: true, Description: "The instance name."},
				"state":               {Type: cty.String, Required: true, Description: "\"stopped\" or \"running\"."},
				"snapshot_before":     {Type: cty.Bool, Description: "Take a snapshot (migrate-STEP-UNIXTIME) just before the change."},
				"keep_for_rollback":   {Type: cty.Bool, Description: "Mark a stopped instance as kept for rollback (user.migrate.keep_for_rollback), so that no cleanup deletes it before its retain_until; true by default."},
				"stop_timeout":        {Type: cty.String, Description: "How long a graceful stop may take, \"30s\" by default."},
				"force_after":         {Type: cty.Bool, Description: "Force the stop when the graceful one times out; otherwise the step fails and the instance keeps running."},
				"restore_on_rollback": {Type: cty.Bool, Description: "Rollback restores the snapshot taken before the change, then starts the instance again."},
			},
			Outputs: map[string]cty.Type{"instance": cty.String, "previous_state": cty.String, "snapshot": cty.String},
		},
		Snapshot: {
			Description: "Creates, restores or deletes a named snapshot of an instance.",
			Attributes: map[string]phases.Attribute{
				"instance":        {Type: cty.String, Required: true, Description: "The instance name."},
				"name":            {Type: cty.String, Required: true, Description: "The snapshot name."},
				"action":          {Type: cty.String, Description: "\"create\" (default; rollback deletes it), \"restore\" or \"delete\" (irreversible)."},
				"snapshot_before": {Type: cty.Bool, Description: "With action = \"restore\": take a snapshot first, so that rollback can restore it; without it a restore cannot be undone."},
			},
			Outputs: map[string]cty.Type{"instance": cty.String, "name": cty.String, "before": cty.String},
		},
	},
}

// Schema describes the provider block and the step types.
func (p *Provider) Schema() phases.Schema { return schema }

// Configure reads the provider block and builds the client; it does not
// connect yet.
func (p *Provider) Configure(_ context.Context, req providers.ConfigureRequest) providers.ConfigureResponse {
	s, diags := configure(req)
	if diags.HasErrors() {
		p.mu.Lock()
		p.sDiags = diags
		p.mu.Unlock()
		return providers.ConfigureResponse{Diagnostics: diags}
	}
	c, err := incusapi.New(s.opts)
	if err != nil {
		diags = phases.Errorf("Invalid Incus Connection Settings", "The incus provider %q cannot be set up: %v.", req.Name, err)
		p.mu.Lock()
		p.sDiags = diags
		p.mu.Unlock()
		return providers.ConfigureResponse{Diagnostics: diags}
	}
	p.mu.Lock()
	p.s, p.client = s, c
	p.mu.Unlock()
	return providers.ConfigureResponse{Diagnostics: diags}
}

// Close drops idle connections.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
	}
	return nil
}

// call is one provider call: the decoded step, the client, the log.
type call struct {
	*decoder
	p      *Provider
	c      *incusapi.Client
	log    io.Writer
	logBuf strings.Builder
}

// begin checks the step type and the provider's configuration and starts
// a call.
func (p *Provider) begin(typ string, addr phases.Address, cfg cty.Value, log io.Writer) (*call, phases.Diagnostics) {
	p.mu.Lock()
	s, client, sDiags := p.s, p.client, p.sDiags
	p.mu.Unlock()
	if diags := providers.Gate(TypeName, schema, typ, s != nil, sDiags); diags != nil {
		return nil, diags
	}
	if log == nil {
		log = io.Discard
	}
	return &call{decoder: newDecoder(addr, cfg), p: p, c: client, log: log}, nil
}

// logf writes a line to the step's log, scrubbed.
func (c *call) logf(format string, args ...any) {
	fmt.Fprintln(c.log, c.scrub.Text(fmt.Sprintf(format, args...)))
}

// finish scrubs what leaves the provider.
func (c *call) finish(diags phases.Diagnostics) phases.Diagnostics {
	return c.scrub.Diags(append(c.diags, diags...))
}

// apiErr turns a client error into a diagnostic a person can act on.
func (c *call) apiErr(summary string, err error) phases.Diagnostics {
	var unreachable *incusapi.UnreachableError
	var untrusted *incusapi.UntrustedError
	var badCert *incusapi.ServerCertError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return phases.Errorf("Step Interrupted", "%s was stopped before it finished (%v). The daemon may still complete an operation already sent; the next run reads the instance first and goes on from there.", c.addr, err)
	case errors.As(err, &unreachable):
		return phases.Errorf("Incus Unreachable", "%s cannot reach the Incus daemon at %s: %v.", c.addr, c.p.s.where, err)
	case errors.As(err, &untrusted):
		how := "incus config trust add-certificate CERT --name migrate"
		if c.p.s.clientCert != "" {
			how = fmt.Sprintf("incus config trust add-certificate %s --name migrate", c.p.s.clientCert)
		}
		return phases.Errorf("Client Certificate Not Trusted", "The Incus server at %s does not trust migrate's client certificate: %v. Trust it once on the server (over its unix socket): `%s`; or create a token there with `incus config trust add migrate` and add the remote with `incus remote add NAME ADDRESS --token TOKEN`.", c.p.s.where, err, how)
	case errors.As(err, &badCert):
		return phases.Errorf("Server Certificate Mismatch", "%v.", err)
	case errors.Is(err, incusapi.ErrConflict):
		return phases.Errorf("Concurrent Change", "%s: the instance changed after the plan read it (its ETag differs), so the change was not applied rather than overwrite someone else's: %v. Make a new plan to see the current state.", c.addr, err)
	}
	return phases.Errorf(summary, "%s: %v.", c.addr, strings.TrimSuffix(err.Error(), "."))
}

// Read observes a step.
func (p *Provider) Read(ctx context.Context, req providers.ReadRequest) providers.ReadResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.ReadResponse{Diagnostics: diags}
	}
	var r providers.ReadResponse
	switch req.Type {
	case Instance:
		r = c.readInstance(ctx, req)
	case InstanceState:
		r = c.readState(ctx, req)
	case Snapshot:
		r = c.readSnapshot(ctx, req)
	}
	r.Detail = c.scrub.Text(r.Detail)
	if r.Inverse != nil {
		c.scrubInverse(r.Inverse)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Plan validates a step and says what Apply would do.
func (p *Provider) Plan(ctx context.Context, req providers.PlanRequest) providers.PlanResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, nil)
	if diags != nil {
		return providers.PlanResponse{Diagnostics: diags}
	}
	var r providers.PlanResponse
	switch req.Type {
	case Instance:
		r = c.planInstance(ctx, req)
	case InstanceState:
		r = c.planState(ctx, req)
	case Snapshot:
		r = c.planSnapshot(ctx, req)
	}
	r.Diff = c.scrub.Text(r.Diff)
	r.Private = json.RawMessage(c.scrub.Text(string(r.Private)))
	if len(r.Private) == 0 {
		r.Private = nil
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Apply runs a step.
func (p *Provider) Apply(ctx context.Context, req providers.ApplyRequest) providers.ApplyResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, req.Log)
	if diags != nil {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	var r providers.ApplyResponse
	if err := ctx.Err(); err != nil {
		r.Diagnostics = c.apiErr("Step Interrupted", err)
	} else {
		switch req.Type {
		case Instance:
			r = c.applyInstance(ctx, req)
		case InstanceState:
			r = c.applyState(ctx, req)
		case Snapshot:
			r = c.applySnapshot(ctx, req)
		}
	}
	if r.Outputs == cty.NilVal {
		r.Outputs = cty.NullVal(outputType(req.Type))
	}
	if r.Inverse != nil {
		c.scrubInverse(r.Inverse)
	}
	if len(r.Private) > 0 {
		r.Private = json.RawMessage(c.scrub.Text(string(r.Private)))
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

// Revert undoes a step with the inverse Apply returned.
func (p *Provider) Revert(ctx context.Context, req providers.RevertRequest) providers.RevertResponse {
	c, diags := p.begin(req.Type, req.Addr, req.Config, req.Log)
	if diags != nil {
		return providers.RevertResponse{Diagnostics: diags}
	}
	var r providers.RevertResponse
	switch req.Type {
	case Instance:
		r = c.revertInstance(ctx, req)
	case InstanceState:
		r = c.revertState(ctx, req)
	case Snapshot:
		r = c.revertSnapshot(ctx, req)
	}
	r.Diagnostics = c.finish(r.Diagnostics)
	return r
}

func outputType(typ string) cty.Type {
	m := schema.StepTypes[typ].Outputs
	if m == nil {
		return cty.EmptyObject
	}
	return cty.Object(m)
}

func (c *call) scrubInverse(inv *providers.Inverse) {
	inv.Description = c.scrub.Text(inv.Description)
	if len(inv.Data) > 0 {
		inv.Data = json.RawMessage(c.scrub.Text(string(inv.Data)))
	}
}

// marshal encodes inverse or private data; the types are ours, so an
// error is a bug.
func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// pick returns the value kept in an inverse unless it was redacted there
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

// unknownText stands in for values known only after earlier steps run.
const unknownText = "(known after apply)"

func isNotFound(err error) bool { return incusapi.IsNotFound(err) }
