package sdk_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

type inner struct {
	Host string `cty:"host"`
	Port int    `cty:"port"`
}

type shapes struct {
	Name    string            `cty:"name" required:"true" doc:"The name."`
	On      bool              `cty:"on"`
	Count   int64             `cty:"count"`
	Ratio   float64           `cty:"ratio"`
	Status  *int              `cty:"status"`
	Args    []string          `cty:"args"`
	Env     map[string]string `cty:"env"`
	Server  inner             `cty:"server"`
	Servers []inner           `cty:"servers"`
	Any     cty.Value         `cty:"any"`
	Token   string            `cty:"token" sensitive:"true"`
	ignored string
}

func TestAttributesMatchHandWritten(t *testing.T) {
	got, err := sdk.Attributes(shapes{})
	if err != nil {
		t.Fatal(err)
	}
	obj := cty.Object(map[string]cty.Type{"host": cty.String, "port": cty.Number})
	want := map[string]phases.Attribute{
		"name":    {Type: cty.String, Required: true, Description: "The name."},
		"on":      {Type: cty.Bool},
		"count":   {Type: cty.Number},
		"ratio":   {Type: cty.Number},
		"status":  {Type: cty.Number},
		"args":    {Type: cty.List(cty.String)},
		"env":     {Type: cty.Map(cty.String)},
		"server":  {Type: obj},
		"servers": {Type: cty.List(obj)},
		"any":     {Type: cty.DynamicPseudoType},
		"token":   {Type: cty.String, Sensitive: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d attributes, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		g := got[k]
		if !g.Type.Equals(w.Type) || g.Required != w.Required || g.Sensitive != w.Sensitive || g.Description != w.Description {
			t.Errorf("%s = %#v, want %#v", k, g, w)
		}
	}
	outs, err := sdk.Types(inner{})
	if err != nil || len(outs) != 2 || outs["port"] != cty.Number {
		t.Errorf("Types = %v, %v", outs, err)
	}
}

func TestAttributesRefuseUnsupportedTypes(t *testing.T) {
	for name, v := range map[string]any{
		"chan": struct {
			C chan int `cty:"c"`
		}{},
		"duration": struct {
			D time.Duration `cty:"d"`
		}{},
		"int keys": struct {
			M map[int]string `cty:"m"`
		}{},
		"nested": struct {
			N struct {
				F func() `cty:"f"`
			} `cty:"n"`
		}{},
	} {
		if _, err := sdk.Attributes(v); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := sdk.Attributes("not a struct"); err == nil {
		t.Error("a string was taken for a struct")
	}
	bad := &sdk.Provider[int]{Name: "bad", Steps: []sdk.Step[int]{&sdk.StepType[int, struct {
		C chan int `cty:"c"`
	}, none, none]{Name: "x"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "chan int") {
		t.Errorf("Check = %v, want the field type named", err)
	}
}

type none = struct{}

// recorder is a provider whose one step type remembers what it was given.
type recorder struct {
	calls []string
	got   shapes
}

func newRecorder(unknowns bool) (*recorder, *sdk.Provider[*recorder]) {
	r := &recorder{}
	st := &sdk.StepType[*recorder, shapes, none, none]{
		Name: "thing", Description: "A thing.", Unknowns: unknowns,
		Outputs: struct {
			Out string `cty:"out"`
		}{},
		Read: func(_ context.Context, c *sdk.Call[*recorder], a shapes, _ *sdk.Prior[none, none]) sdk.Read[none] {
			c.Settings.calls, c.Settings.got = append(c.Settings.calls, "read"), a
			return sdk.Read[none]{Observation: providers.Present}
		},
		Plan: func(_ context.Context, c *sdk.Call[*recorder], a shapes, _ *sdk.Prior[none, none]) sdk.Plan[none] {
			c.Settings.calls, c.Settings.got = append(c.Settings.calls, "plan"), a
			return sdk.Plan[none]{Diff: "name " + a.Name}
		},
		Apply: func(_ context.Context, c *sdk.Call[*recorder], a shapes, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
			c.Settings.calls, c.Settings.got = append(c.Settings.calls, "apply"), a
			return sdk.Apply[none, none]{}
		},
	}
	p := &sdk.Provider[*recorder]{
		Name:          "rec",
		ConfigureFunc: func(context.Context, providers.ConfigureRequest) (*recorder, phases.Diagnostics) { return r, nil },
		Steps:         []sdk.Step[*recorder]{st},
	}
	return r, p
}

func addr() phases.Address { return phases.Address{Type: "thing", Name: "x"} }

func configured(t *testing.T, p providers.Interface) {
	t.Helper()
	if d := p.Configure(context.Background(), providers.ConfigureRequest{Name: "rec"}).Diagnostics; d.HasErrors() {
		t.Fatal(d.Err())
	}
}

func TestDecode(t *testing.T) {
	r, p := newRecorder(false)
	configured(t, p)
	cfg := cty.ObjectVal(map[string]cty.Value{
		"name":    cty.StringVal("n"),
		"count":   cty.NumberIntVal(3),
		"args":    cty.TupleVal([]cty.Value{cty.StringVal("a"), cty.StringVal("b")}),
		"env":     cty.ObjectVal(map[string]cty.Value{"K": cty.StringVal("v")}),
		"server":  cty.ObjectVal(map[string]cty.Value{"host": cty.StringVal("h"), "port": cty.NumberIntVal(8)}),
		"servers": cty.NullVal(cty.List(cty.Object(map[string]cty.Type{"host": cty.String, "port": cty.Number}))),
		"any":     cty.StringVal("dyn"),
	})
	if d := p.Plan(context.Background(), providers.PlanRequest{Type: "thing", Addr: addr(), Config: cfg}).Diagnostics; d.HasErrors() {
		t.Fatal(d.Err())
	}
	g := r.got
	if g.Name != "n" || g.Count != 3 || !reflect.DeepEqual(g.Args, []string{"a", "b"}) || g.Env["K"] != "v" ||
		g.Server != (inner{"h", 8}) || g.Servers != nil || g.Status != nil || g.On || g.Any.AsString() != "dyn" {
		t.Errorf("decoded %+v", g)
	}
	five := cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("n"), "status": cty.NumberIntVal(5)})
	p.Plan(context.Background(), providers.PlanRequest{Type: "thing", Addr: addr(), Config: five})
	if r.got.Status == nil || *r.got.Status != 5 {
		t.Errorf("status = %v, want 5", r.got.Status)
	}
	for _, tt := range []struct {
		cfg  map[string]cty.Value
		want []string
	}{
		{map[string]cty.Value{}, []string{"Missing Required Attribute", `"name"`, "thing.x"}},
		{map[string]cty.Value{"name": cty.StringVal("n"), "args": cty.StringVal("ls -l")}, []string{`"args"`, "must be a list of strings, not string"}},
		{map[string]cty.Value{"name": cty.StringVal("n"), "count": cty.NumberFloatVal(1.5)}, []string{`"count"`, "whole number"}},
		{map[string]cty.Value{"name": cty.StringVal("n"), "args": cty.ListVal([]cty.Value{cty.NullVal(cty.String)})}, []string{`"args"`, "null elements"}},
	} {
		d := p.Plan(context.Background(), providers.PlanRequest{Type: "thing", Addr: addr(), Config: cty.ObjectVal(tt.cfg)}).Diagnostics
		for _, w := range tt.want {
			if err := d.Err(); err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %v does not mention %q", tt.cfg, err, w)
			}
		}
	}
}

func TestUnknownValues(t *testing.T) {
	ctx := context.Background()
	cfg := cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("n"), "args": cty.ListVal([]cty.Value{cty.UnknownVal(cty.String)})})
	r, p := newRecorder(false)
	configured(t, p)
	if o := p.Read(ctx, providers.ReadRequest{Type: "thing", Addr: addr(), Config: cfg}).Observation; o != providers.Unknown {
		t.Errorf("Read = %v, want unknown", o)
	}
	pr := p.Plan(ctx, providers.PlanRequest{Type: "thing", Addr: addr(), Config: cfg})
	if pr.Diff != "(known after apply): args" || pr.Diagnostics.HasErrors() {
		t.Errorf("Plan = %q %v", pr.Diff, pr.Diagnostics)
	}
	ar := p.Apply(ctx, providers.ApplyRequest{Type: "thing", Addr: addr(), Config: cfg})
	if err := ar.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), `"args" attribute of thing.x is not known`) {
		t.Errorf("Apply: %v", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("handlers called with unknown values: %v", r.calls)
	}
	r, p = newRecorder(true)
	configured(t, p)
	p.Plan(ctx, providers.PlanRequest{Type: "thing", Addr: addr(), Config: cfg})
	if len(r.calls) != 1 || !reflect.DeepEqual(r.got.Args, []string{sdk.UnknownText}) {
		t.Errorf("with Unknowns: calls %v, args %q", r.calls, r.got.Args)
	}
}

func TestGateAndEnvelope(t *testing.T) {
	ctx := context.Background()
	cfg := cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("n")})
	r, p := newRecorder(false)
	if err := p.Plan(ctx, providers.PlanRequest{Type: "thing", Addr: addr(), Config: cfg}).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Provider Not Configured") {
		t.Errorf("before Configure: %v", err)
	}
	configured(t, p)
	if err := p.Plan(ctx, providers.PlanRequest{Type: "other", Addr: addr()}).Diagnostics.Err(); err == nil ||
		!strings.Contains(err.Error(), `The rec provider has no step type "other"; it has thing.`) {
		t.Errorf("unknown type: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Apply(cctx, providers.ApplyRequest{Type: "thing", Addr: addr(), Config: cfg}).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Step Interrupted") {
		t.Errorf("cancelled: %v", err)
	}
	if len(r.calls) != 0 {
		t.Errorf("handler called: %v", r.calls)
	}
	out := p.Apply(ctx, providers.ApplyRequest{Type: "thing", Addr: addr(), Config: cfg}).Outputs
	if !out.IsNull() || !out.Type().Equals(cty.Object(map[string]cty.Type{"out": cty.String})) {
		t.Errorf("default outputs = %#v, want a null object of the output type", out)
	}
	broken := cty.ObjectVal(map[string]cty.Value{"args": cty.StringVal("not a list")})
	if d := p.Revert(ctx, providers.RevertRequest{Type: "thing", Addr: addr(), Config: broken}).Diagnostics; d != nil {
		t.Errorf("Revert of a type with nothing to undo: %v", d)
	}
	bad := &providers.Prior{Revert: &providers.RevertData{Data: json.RawMessage(`{not json`)}}
	typed := &sdk.Provider[int]{Name: "typed", Steps: []sdk.Step[int]{&sdk.StepType[int, struct{}, none, struct{ A []string }]{
		Name: "t", Read: func(context.Context, *sdk.Call[int], struct{}, *sdk.Prior[none, struct{ A []string }]) sdk.Read[struct{ A []string }] {
			t.Error("Read called with undecodable revert data")
			return sdk.Read[struct{ A []string }]{}
		},
	}}}
	configured(t, typed)
	if err := typed.Read(ctx, providers.ReadRequest{Type: "t", Addr: addr(), Prior: bad}).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Invalid Provider Data") {
		t.Errorf("bad revert data: %v", err)
	}
	failing := &sdk.Provider[int]{Name: "failing", ConfigureFunc: func(context.Context, providers.ConfigureRequest) (int, phases.Diagnostics) {
		return 0, phases.Errorf("Bad", "bad block")
	}, Steps: []sdk.Step[int]{&sdk.StepType[int, struct{}, none, none]{Name: "t"}}}
	failing.Configure(ctx, providers.ConfigureRequest{})
	if err := failing.Plan(ctx, providers.PlanRequest{Type: "t", Addr: addr()}).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Provider Configuration Invalid") {
		t.Errorf("after a failed Configure: %v", err)
	}
}

type leakData struct {
	Token string `json:"token"`
	Note  string `json:"note"`
}

// leaky puts the secrets it is given everywhere a handler can put text.
func leaky() *sdk.Provider[int] {
	type attrs struct {
		Token string `cty:"token" sensitive:"true"`
		Word  string `cty:"word"`
	}
	say := func(a attrs) string { return "token " + a.Token + " word " + a.Word }
	diags := func(a attrs) phases.Diagnostics {
		return phases.Diagnostics{{Severity: phases.Warning, Summary: "Said " + say(a), Detail: say(a)}}
	}
	inv := func(a attrs) *sdk.RevertData[leakData] {
		return &sdk.RevertData[leakData]{Description: say(a), Data: leakData{a.Token, say(a)}}
	}
	st := &sdk.StepType[int, attrs, leakData, leakData]{
		Name: "leak", Description: "Leaks.",
		Outputs: struct {
			Said string `cty:"said"`
		}{},
		Read: func(_ context.Context, c *sdk.Call[int], a attrs, _ *sdk.Prior[leakData, leakData]) sdk.Read[leakData] {
			return sdk.Read[leakData]{Observation: providers.Drifted, Detail: say(a), Revert: inv(a), Diagnostics: diags(a),
				Outputs: struct {
					Said string `cty:"said"`
				}{say(a)}}
		},
		Plan: func(_ context.Context, c *sdk.Call[int], a attrs, _ *sdk.Prior[leakData, leakData]) sdk.Plan[leakData] {
			return sdk.Plan[leakData]{Diff: say(a), Irreversible: say(a), Private: leakData{a.Token, say(a)}, Diagnostics: diags(a)}
		},
		Apply: func(_ context.Context, c *sdk.Call[int], a attrs, planned leakData, _ *sdk.Prior[leakData, leakData]) sdk.Apply[leakData, leakData] {
			c.Log.Printf("%s", say(a))
			c.Log.Write([]byte("no newline at the end " + a.Token))
			return sdk.Apply[leakData, leakData]{Private: planned, Revert: inv(a), Facts: map[string]string{"by": say(a)}, Diagnostics: diags(a),
				Outputs: cty.ObjectVal(map[string]cty.Value{"said": cty.StringVal(say(a))})}
		},
		Revert: func(_ context.Context, c *sdk.Call[int], a attrs, u sdk.Applied[leakData]) phases.Diagnostics {
			c.Log.Printf("%s %s", say(a), u.Data.Note)
			return diags(a)
		},
		Digest: func(_ context.Context, c *sdk.Call[int], a attrs) (string, phases.Diagnostics) { return "", diags(a) },
	}
	return &sdk.Provider[int]{Name: "leaky", Steps: []sdk.Step[int]{st}}
}

// TestScrubsEveryField: a provider that writes its secrets into every
// field leaks none of them through the SDK.
func TestScrubsEveryField(t *testing.T) {
	const s = "canary-sdk-9d2e"
	providertest.Canary(t, providertest.Harness{New: func() providers.Interface { return leaky() }}, []providertest.CanaryCase{
		{Type: "leak", Config: cty.ObjectVal(map[string]cty.Value{"token": cty.StringVal(s), "word": cty.StringVal("plain")}), Secrets: []string{s}},
		{Type: "leak", Config: cty.ObjectVal(map[string]cty.Value{"token": cty.StringVal("x"), "word": cty.StringVal("w-" + s).Mark(phases.SensitiveMark)}), Secrets: []string{s}},
	})
	p := leaky()
	configured(t, p)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: "leak", Addr: addr(), Config: cty.ObjectVal(map[string]cty.Value{"token": cty.StringVal(s), "word": cty.StringVal("plain")})})
	if said := r.Outputs.GetAttr("said"); !said.HasMark(phases.SensitiveMark) {
		t.Errorf("an output holding a secret is not marked sensitive: %#v", said)
	}
	if !strings.Contains(string(r.Revert.Data), phases.Redacted) || !strings.Contains(r.Revert.Description, "word plain") {
		t.Errorf("revertOf = %+v, want the secret's place kept, the rest readable", r.Revert)
	}
}

// TestKeepsWhatTheRunbookWroteInClear: a secret inside a literal the
// runbook wrote in clear stays there; elsewhere it is scrubbed.
func TestKeepsWhatTheRunbookWroteInClear(t *testing.T) {
	p := leaky()
	configured(t, p)
	cfg := cty.ObjectVal(map[string]cty.Value{"token": cty.StringVal("pw-123456"), "word": cty.StringVal("check pw-123456")})
	r := p.Plan(context.Background(), providers.PlanRequest{Type: "leak", Addr: addr(), Config: cfg})
	if want := "token " + phases.Redacted + " word check pw-123456"; r.Diff != want {
		t.Errorf("diff %q, want %q", r.Diff, want)
	}
	var d leakData
	if err := json.Unmarshal(r.Private, &d); err != nil || d.Token != phases.Redacted || !strings.HasSuffix(d.Note, "word check pw-123456") {
		t.Errorf("private %s: %v", r.Private, err)
	}
}

// The provider block's diagnostics leave the provider too: a secret of the
// block that a Configure quotes in an error is scrubbed.
func TestConfigureDiagnosticsScrubbed(t *testing.T) {
	const secret = "hunter2-in-the-block"
	p := &sdk.Provider[int]{Name: "quoting", ConfigureFunc: func(_ context.Context, req providers.ConfigureRequest) (int, phases.Diagnostics) {
		tok, _ := req.Config.GetAttr("token").Unmark()
		return 0, phases.Errorf("Bad Token", "The token %q was refused.", tok.AsString())
	}}
	cfg := cty.ObjectVal(map[string]cty.Value{"token": cty.StringVal(secret).Mark(phases.SensitiveMark)})
	resp := p.Configure(context.Background(), providers.ConfigureRequest{Name: "q", Config: cfg})
	if !resp.Diagnostics.HasErrors() {
		t.Fatal("the error was lost")
	}
	if text := resp.Diagnostics.Err().Error(); strings.Contains(text, secret) {
		t.Errorf("the provider block's secret left Configure: %s", text)
	}
}
