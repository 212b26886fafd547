package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/secret"
)

// Call is what every handler gets besides its decoded attributes.
type Call[S any] struct {
	// Settings are what the provider's Configure returned.
	Settings S
	Type     string
	Addr     phases.Address
	// Log is the step's log, scrubbed line by line; the SDK flushes it
	// when Apply or Revert returns. It discards in Read and Plan.
	Log *secret.Writer
	// Scrub knows every secret of the call; add the ones the handler
	// finds itself (a key read from a file).
	Scrub *secret.Scrubber
	// Approval is the request's, in Apply.
	Approval providers.Approval
	// Stop is the request's, in Apply: closed when a gentle stop was
	// asked. A wait that follows the step's effect selects on it too and,
	// when it closes, returns at once with Stopped set, the Revert of
	// what was done, and StoppedWaiting's diagnostic. nil in Read, Plan
	// and Revert (a nil channel never closes).
	Stop <-chan struct{}
	// AfterChanges is the request's, in Plan: a step this one depends on
	// changes first, so what it reads may not exist yet.
	AfterChanges bool
	// InFlight is the request's, in Read: a run stopped while the step
	// was applied, and what it started may still be under way.
	InFlight bool
	// Rebase is the request's, in Read: report the effect as it is now
	// in Read.Private (providers.ReadRequest.Rebase).
	Rebase bool
	// Resolved is set by a Digest that resolved something the runbook
	// does not pin (providers.DigestResponse.Resolved).
	Resolved string
	intent   func(providers.RevertData) error // the request's, in Apply
	cfg      *config
	sc       *scrubber
}

// Sensitive reports whether the attribute, or the element at keys (int
// or string) inside it, is sensitive.
func (c *Call[S]) Sensitive(attr string, keys ...any) bool {
	return c.cfg.sensitivePath(path(attr, keys))
}

// SensitivePath reports whether the value at p (a path from the
// configuration's root, as cty.Walk gives it: GetAttr steps inside
// objects) is sensitive. Sensitive takes keys; this takes object paths.
func (c *Call[S]) SensitivePath(p cty.Path) bool { return c.cfg.sensitivePath(p) }

// Unknown reports whether the attribute, or the element at keys inside
// it, is not wholly known (only handlers with Unknowns see such values).
func (c *Call[S]) Unknown(attr string, keys ...any) bool {
	if c.cfg.known {
		return false
	}
	v, err := path(attr, keys).Apply(c.cfg.obj)
	return err == nil && !v.IsWhollyKnown()
}

func (c *Call[S]) scrubber() *scrubber {
	if c.sc == nil || c.sc.public == nil && c.cfg != nil && c.Scrub.Active() {
		c.sc = &scrubber{s: c.Scrub}
		if c.cfg != nil && c.Scrub.Active() {
			c.sc.public = c.cfg.publicStrings()
		}
	}
	return c.sc
}

// Null reports whether the attribute was not set.
func (c *Call[S]) Null(attr string) bool { return c.cfg.obj.GetAttr(attr).IsNull() }

// Prior is the state's memory of the step's last apply, decoded.
type Prior[P, I any] struct {
	Outputs cty.Value
	Private P
	Revert  *RevertData[I]
}

// RevertData says how to revert a step; Data is kept in the state (the SDK
// scrubs secrets out of it: keep a secret's place, not the secret).
type RevertData[I any] struct {
	Description string
	Data        I
}

// Read is what a Read handler returns. Outputs is a struct value with
// cty tags, a cty.Value, or nil (the recorded outputs stay).
type Read[I any] struct {
	Observation providers.Observation
	Detail      string
	Outputs     any
	Revert      *RevertData[I]
	// Identity names the thing as it is now (providers.ReadResponse).
	Identity string
	// Private, in a Rebase read, is the step's private data (of its type
	// P) as it is now: it replaces the recorded one.
	Private     any
	Diagnostics phases.Diagnostics
}

// Plan is what a Plan handler returns; Private comes back to Apply.
// Outputs, when not nil, are the outputs the plan can tell already (a
// struct value with cty tags, or a cty.Value); the outputs named in
// Unknown are known after apply (providers.PlanResponse.Outputs).
type Plan[P any] struct {
	Diff         string
	Irreversible string
	Private      P
	Outputs      any
	Unknown      []string
	// CopyBytes: providers.PlanResponse.CopyBytes.
	CopyBytes   int64
	Diagnostics phases.Diagnostics
}

// Apply is what an Apply handler returns. Outputs as in Read; nil gives
// a null object of the step type's outputs. A nil Revert: not undoable.
type Apply[P, I any] struct {
	Outputs any
	Private P
	Revert  *RevertData[I]
	Facts   map[string]string
	// Identity names what the step made or acted on
	// (providers.ApplyResponse.Identity).
	Identity string
	// Stopped: the Apply made its effect and stopped waiting because
	// Call.Stop closed (providers.ApplyResponse.Stopped); its
	// diagnostics say what was done and what was not waited for
	// (StoppedWaiting).
	Stopped     bool
	Diagnostics phases.Diagnostics
}

// Applied is what a Revert handler gets: the apply being reverted.
type Applied[I any] struct {
	Description string
	Data        I
	// Outputs of the apply being undone.
	Outputs cty.Value
	// Resumed: a revert of the step ran before and was not recorded as
	// finished; it must be safe to repeat.
	Resumed bool
}

// StepType declares one step type: S are the provider's settings, A the
// attributes struct (which is the schema, see Attributes), P the private
// data from Plan to Apply, I the revert data. Unset handlers: Read says
// present once applied, Plan says nothing more than the attributes
// (PlanDiff), Revert has nothing to undo.
type StepType[S, A, P, I any] struct {
	Name, Description   string
	CanCheck, CheckOnly bool
	// WaitsOnly: the step type has no effect of its own, it only waits
	// or reads (phases.StepType.WaitsOnly); a gentle stop cancels its
	// context at once.
	WaitsOnly bool
	// Rollback says what rollback does, in a sentence for the reference.
	Rollback string
	// Rebase: later steps may change the effect on purpose; the Read
	// handler then sees c.Rebase and returns the effect as it is now in
	// Read.Private (phases.StepType.Rebase).
	Rebase bool
	// Outputs is a struct value or type whose cty tags name the outputs;
	// those tagged sensitive:"true" are marked so when returned as a struct.
	Outputs any
	// Unknowns: Read and Plan are called even when attributes are not
	// known yet (strings hold UnknownText, c.Unknown says which);
	// otherwise Read says Unknown and Plan defers to apply time.
	Unknowns bool
	// Validate checks the decoded attributes before Read, Plan and Apply.
	Validate func(c *Call[S], a *A) phases.Diagnostics
	Read     func(ctx context.Context, c *Call[S], a A, prior *Prior[P, I]) Read[I]
	Plan     func(ctx context.Context, c *Call[S], a A, prior *Prior[P, I]) Plan[P]
	Apply    func(ctx context.Context, c *Call[S], a A, planned P, prior *Prior[P, I]) Apply[P, I]
	// Revert undoes an apply; its attributes are decoded leniently (no
	// required check, unknowns as with Unknowns): rollback evaluates
	// the step again from the state, which may lack them.
	Revert func(ctx context.Context, c *Call[S], a A, u Applied[I]) phases.Diagnostics
	// Digest adds to the step's input hash (providers.InputDigester).
	Digest func(ctx context.Context, c *Call[S], a A) (string, phases.Diagnostics)

	once  sync.Once
	attrs map[string]phases.Attribute
	inTy  cty.Type // the object type of attrs
	outTy cty.Type
	// secretOuts are the outputs tagged sensitive:"true".
	secretOuts []string
	err        error
}

// derived computes the schema's parts once: calls must cost little (a
// runbook may hold thousands of zero waits).
func (t *StepType[S, A, P, I]) derived() (map[string]phases.Attribute, cty.Type, error) {
	t.once.Do(func() {
		t.attrs, t.err = Attributes(reflect.TypeFor[A]())
		types, err := Types(t.Outputs)
		if t.err == nil {
			t.err = err
		}
		t.outTy = cty.Object(types)
		t.inTy = objectType(t.attrs)
		if t.Outputs != nil {
			outs, _ := Attributes(t.Outputs)
			for name, a := range outs {
				if a.Sensitive {
					t.secretOuts = append(t.secretOuts, name)
				}
			}
		}
	})
	return t.attrs, t.outTy, t.err
}

// Step is a StepType of any attributes and data, as a Provider holds it.
type Step[S any] interface {
	name() string
	schema() (phases.StepType, error)
	read(context.Context, *Call[S], providers.ReadRequest) providers.ReadResponse
	plan(context.Context, *Call[S], providers.PlanRequest) providers.PlanResponse
	apply(context.Context, *Call[S], providers.ApplyRequest) providers.ApplyResponse
	revert(context.Context, *Call[S], providers.RevertRequest) providers.RevertResponse
	digest(context.Context, *Call[S], providers.DigestRequest) providers.DigestResponse
}

func (t *StepType[S, A, P, I]) name() string { return t.Name }

func (t *StepType[S, A, P, I]) schema() (phases.StepType, error) {
	st, err := StepSchema[A](t.Description, t.Outputs)
	if err != nil {
		return st, fmt.Errorf("step type %s: %w", t.Name, err)
	}
	st.CanCheck, st.CheckOnly, st.WaitsOnly, st.Rollback, st.Rebase = t.CanCheck, t.CheckOnly, t.WaitsOnly, t.Rollback, t.Rebase
	return st, nil
}

// begin decodes the configuration into a; strict adds the check of
// required attributes and of Validate.
func (t *StepType[S, A, P, I]) begin(c *Call[S], cfg cty.Value, strict bool) (A, []string, phases.Diagnostics) {
	var a A
	attrs, _, _ := t.derived()
	conf, diags := prepare(c.Addr, cfg, attrs, t.inTy, c.Scrub)
	c.cfg = conf
	if diags.HasErrors() {
		return a, nil, diags
	}
	if strict {
		if diags = conf.required(); diags.HasErrors() {
			return a, nil, diags
		}
	}
	if diags = conf.decode(&a); diags.HasErrors() {
		return a, nil, diags
	}
	unknown := conf.unknown()
	if strict && t.Validate != nil && (len(unknown) == 0 || t.Unknowns) {
		diags = t.Validate(c, &a)
	}
	return a, unknown, diags
}

func (t *StepType[S, A, P, I]) prior(p *providers.Prior) (*Prior[P, I], phases.Diagnostics) {
	if p == nil {
		return nil, nil
	}
	out := &Prior[P, I]{Outputs: p.Outputs}
	if err := decodeJSON(p.Private, &out.Private); err != nil {
		return nil, badData("private data", err)
	}
	if p.Revert != nil {
		out.Revert = &RevertData[I]{Description: p.Revert.Description}
		if err := decodeJSON(p.Revert.Data, &out.Revert.Data); err != nil {
			return nil, badData("revert data", err)
		}
	}
	return out, nil
}

func badData(what string, err error) phases.Diagnostics {
	return phases.Errorf("Invalid Provider Data", "The %s recorded in the state cannot be read: %v.", what, err)
}

func decodeJSON(b json.RawMessage, into any) error {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, into)
}

func isZero(v any) bool { return v == nil || reflect.ValueOf(v).IsZero() }

func notKnown(addr phases.Address, names []string) phases.Diagnostics {
	var d phases.Diagnostics
	for _, n := range names {
		d = append(d, phases.Errorf("Unknown Attribute Value", "The %q attribute of %s is not known; it depends on a step that has not run.", n, addr)...)
	}
	return d
}

func (t *StepType[S, A, P, I]) read(ctx context.Context, c *Call[S], req providers.ReadRequest) providers.ReadResponse {
	a, unknown, diags := t.begin(c, req.Config, true)
	if diags.HasErrors() || len(unknown) > 0 && !t.Unknowns {
		return providers.ReadResponse{Observation: providers.Unknown, Diagnostics: diags}
	}
	prior, d := t.prior(req.Prior)
	if d != nil {
		return providers.ReadResponse{Observation: providers.Unknown, Diagnostics: d}
	}
	if t.Read == nil {
		return providers.PresentIfPrior(req)
	}
	r := t.Read(ctx, c, a, prior)
	resp := providers.ReadResponse{Observation: r.Observation, Detail: r.Detail, Identity: r.Identity, Diagnostics: append(diags, r.Diagnostics...)}
	var err error
	if r.Private != nil {
		if resp.Private, err = c.scrubber().encode(r.Private); err != nil {
			resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Private Data", err)...)
		}
	}
	if resp.Outputs, err = t.outputs(r.Outputs, false); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Outputs", err)...)
	}
	if resp.Revert, err = t.revertOf(c, r.Revert); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Revert", err)...)
	}
	return resp
}

func (t *StepType[S, A, P, I]) plan(ctx context.Context, c *Call[S], req providers.PlanRequest) providers.PlanResponse {
	a, unknown, diags := t.begin(c, req.Config, true)
	if diags.HasErrors() {
		return providers.PlanResponse{Diagnostics: diags}
	}
	if len(unknown) > 0 && !t.Unknowns {
		return providers.PlanResponse{Diff: deferred(unknown), Diagnostics: diags}
	}
	prior, d := t.prior(req.Prior)
	if d != nil {
		return providers.PlanResponse{Diagnostics: d}
	}
	if t.Plan == nil {
		return providers.PlanResponse{Diff: PlanDiff(c, a), Diagnostics: diags}
	}
	r := t.Plan(ctx, c, a, prior)
	resp := providers.PlanResponse{Diff: r.Diff, Irreversible: r.Irreversible, CopyBytes: r.CopyBytes, Diagnostics: append(diags, r.Diagnostics...)}
	var err error
	if resp.Private, err = c.scrubber().encode(r.Private); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Private Data", err)...)
	}
	if r.Outputs != nil {
		if resp.Outputs, err = t.plannedOutputs(r.Outputs, r.Unknown); err != nil {
			resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Planned Outputs", err)...)
		}
		resp.Outputs = c.scrubber().outputs(resp.Outputs)
	}
	return resp
}

// plannedOutputs are a plan's outputs, those named in unknown replaced by
// unknown values of their type.
func (t *StepType[S, A, P, I]) plannedOutputs(v any, unknown []string) (cty.Value, error) {
	out, err := t.outputs(v, true)
	if err != nil || len(unknown) == 0 || out.IsNull() || !out.Type().IsObjectType() {
		return out, err
	}
	attrs := out.AsValueMap()
	for _, name := range unknown {
		old, ok := attrs[name]
		if !ok {
			return cty.NilVal, fmt.Errorf("no output %q to leave unknown", name)
		}
		attrs[name] = cty.UnknownVal(old.Type()).WithMarks(old.Marks())
	}
	return cty.ObjectVal(attrs), nil
}

// deferred is the diff of a plan whose attributes are not known yet.
func deferred(unknown []string) string {
	return "(known after apply): " + andList(unknown)
}

func (t *StepType[S, A, P, I]) apply(ctx context.Context, c *Call[S], req providers.ApplyRequest) providers.ApplyResponse {
	a, unknown, diags := t.begin(c, req.Config, true)
	if !diags.HasErrors() {
		diags = append(diags, notKnown(req.Addr, unknown)...)
	}
	if diags.HasErrors() {
		return providers.ApplyResponse{Diagnostics: diags}
	}
	if err := ctx.Err(); err != nil {
		return providers.ApplyResponse{Diagnostics: Interrupted(req.Addr, err)}
	}
	prior, d := t.prior(req.Prior)
	if d != nil {
		return providers.ApplyResponse{Diagnostics: d}
	}
	var planned P
	if err := decodeJSON(req.Planned, &planned); err != nil {
		return providers.ApplyResponse{Diagnostics: badData("planned data", err)}
	}
	if t.Apply == nil {
		return providers.ApplyResponse{Diagnostics: phases.Errorf("Cannot Apply", "The %s step type cannot be applied.", t.Name)}
	}
	r := t.Apply(ctx, c, a, planned, prior)
	sc := c.scrubber()
	resp := providers.ApplyResponse{Facts: r.Facts, Identity: r.Identity, Stopped: r.Stopped, Diagnostics: append(diags, r.Diagnostics...)}
	var err error
	if resp.Outputs, err = t.outputs(r.Outputs, true); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Outputs", err)...)
	}
	if resp.Private, err = sc.encode(r.Private); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Private Data", err)...)
	}
	if resp.Revert, err = t.revertOf(c, r.Revert); err != nil {
		resp.Diagnostics = append(resp.Diagnostics, phases.FromError("Invalid Revert", err)...)
	}
	return resp
}

func (t *StepType[S, A, P, I]) revertOf(c *Call[S], inv *RevertData[I]) (*providers.RevertData, error) {
	if inv == nil {
		return nil, nil
	}
	data, err := c.scrubber().encode(inv.Data)
	if err != nil {
		return nil, err
	}
	return &providers.RevertData{Description: inv.Description, Data: data}, nil
}

// outputs converts a handler's outputs to a value of the declared type;
// none is a null object of that type (Apply) or nothing (Read).
func (t *StepType[S, A, P, I]) outputs(v any, apply bool) (cty.Value, error) {
	_, ty, err := t.derived()
	if err != nil {
		return cty.NilVal, err
	}
	switch v := v.(type) {
	case nil:
		if !apply {
			return cty.NilVal, nil
		}
		return cty.NullVal(ty), nil
	case cty.Value:
		return v, nil
	}
	if reflect.TypeOf(v).NumField() == 0 {
		return cty.EmptyObjectVal, nil
	}
	out, err := gocty.ToCtyValue(v, ty)
	if err != nil || len(t.secretOuts) == 0 {
		return out, err
	}
	attrs := out.AsValueMap()
	for _, name := range t.secretOuts {
		attrs[name] = attrs[name].Mark(phases.SensitiveMark)
	}
	if docs, ok := v.(SecretDocuments); ok {
		for name, parts := range docs.SecretParts() {
			if x, ok := attrs[name]; ok && x.Type() == cty.String && x.IsKnown() && !x.IsNull() {
				text, _ := x.Unmark()
				attrs[name] = x.Mark(phases.NewSecretParts(text.AsString(), parts))
			}
		}
	}
	return cty.ObjectVal(attrs), nil
}

// SecretDocuments is implemented by an outputs struct whose sensitive
// outputs are documents whose secrets the provider knows one by one (a
// Talos machine config: its keys and tokens). Such an output carries a
// phases.SecretParts mark beside the sensitive one, so that scrubbers
// learn those parts and the document whole, not every word of it: the
// node's name in the document is no secret.
type SecretDocuments interface {
	// SecretParts names, by output, the secrets inside it.
	SecretParts() map[string][]string
}

func (t *StepType[S, A, P, I]) revert(ctx context.Context, c *Call[S], req providers.RevertRequest) providers.RevertResponse {
	if t.Revert == nil {
		return providers.RevertResponse{} // nothing to undo, whatever the configuration says now
	}
	a, _, diags := t.begin(c, req.Config, false)
	if diags.HasErrors() {
		return providers.RevertResponse{Diagnostics: diags}
	}
	u := Applied[I]{Description: req.Revert.Description, Outputs: req.Outputs, Resumed: req.Resumed}
	if err := decodeJSON(req.Revert.Data, &u.Data); err != nil {
		return providers.RevertResponse{Diagnostics: badData("revert data", err)}
	}
	return providers.RevertResponse{Diagnostics: append(diags, t.Revert(ctx, c, a, u)...)}
}

func (t *StepType[S, A, P, I]) digest(ctx context.Context, c *Call[S], req providers.DigestRequest) providers.DigestResponse {
	if t.Digest == nil {
		return providers.DigestResponse{}
	}
	a, unknown, diags := t.begin(c, req.Config, true)
	if diags.HasErrors() {
		return providers.DigestResponse{Diagnostics: diags}
	}
	if len(unknown) > 0 {
		return providers.DigestResponse{Unknown: true}
	}
	d, diags := t.Digest(ctx, c, a)
	return providers.DigestResponse{Digest: d, Resolved: c.Resolved, Diagnostics: diags}
}

// Interrupted is the diagnostic of a step stopped by its context.
func Interrupted(addr phases.Address, err error) phases.Diagnostics {
	return phases.Errorf("Step Interrupted", "%s was stopped before it finished: %v.", addr, err)
}

// ErrStopped is the cause of a context from WaitContext ended by Stop.
var ErrStopped = errors.New("a gentle stop was asked (the first Ctrl-C)")

// WaitContext returns ctx, ended also when Stop closes (its cause is then
// ErrStopped), for a wait after the step's effect whose loop only watches
// its context; see StopCut. Call release once the wait is over.
func (c *Call[S]) WaitContext(ctx context.Context) (_ context.Context, release func()) {
	if c.Stop == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-c.Stop:
			cancel(ErrStopped)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// StopCut reports whether a context from WaitContext ended by Stop.
func StopCut(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrStopped) }

// StoppedWaiting is the diagnostic of an Apply that Call.Stop ended while
// it waited: done says what the step did ("instance web created and
// started"), notWaited what it was still waiting for ("its IPv4 address
// (wait_for)"). Return it with Stopped set and the Revert of what was
// done.
func StoppedWaiting(addr phases.Address, done, notWaited string) phases.Diagnostics {
	return phases.Errorf("Stopped While Waiting", "%s was stopped while it waited: %s, but %s was not waited for. It is recorded as not done; the next run finds what was done and waits again.", addr, done, notWaited)
}

// PlanDiff lists the attributes set, one "name: value" a line, for step
// types without a Plan handler.
func PlanDiff[S, A any](c *Call[S], a A) string {
	var b []byte
	for _, name := range sortedNames(c.cfg.attrs) {
		v := c.cfg.obj.GetAttr(name)
		if v.IsNull() {
			continue
		}
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = fmt.Appendf(b, "%s: %s", name, c.cfg.show(cty.GetAttrPath(name), v))
	}
	return string(b)
}

// show formats the value at p, its sensitive parts redacted.
func (c *config) show(p cty.Path, v cty.Value) string {
	switch {
	case c.sensitivePath(p):
		return phases.Redacted
	case !v.IsKnown():
		return UnknownText
	case v.Type() == cty.String:
		return v.AsString()
	case v.Type() == cty.Number:
		return v.AsBigFloat().Text('f', -1)
	case v.Type() == cty.Bool:
		return fmt.Sprint(v.True())
	}
	var parts []string
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		switch {
		case v.Type().IsObjectType():
			parts = append(parts, k.AsString()+"="+c.show(p.GetAttr(k.AsString()), e))
		case v.Type().IsMapType():
			parts = append(parts, k.AsString()+"="+c.show(p.Index(k), e))
		default:
			parts = append(parts, c.show(p.Index(k), e))
		}
	}
	return fmt.Sprint(parts)
}

// Intend saves inv as the step's revert data before an Apply handler
// makes a change it cannot take back by itself (providers.ApplyRequest.
// Intent): a run killed before the handler returns is rolled back with
// it, and the next Apply finds it in its prior. It is scrubbed as the
// returned revert data is. Where nothing can save it (no Intent in the
// request), it returns nil and the handler goes on as before.
func Intend[S, I any](c *Call[S], inv *RevertData[I]) error {
	if c.intent == nil || inv == nil {
		return nil
	}
	sc := c.scrubber()
	data, err := sc.encode(inv.Data)
	if err != nil {
		return err
	}
	return c.intent(providers.RevertData{Description: sc.text(inv.Description), Data: data})
}
