package sdk_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// greeter is what Configure makes of the provider block.
type greeter struct{ greeting string }

type greetBlock struct {
	Greeting string `cty:"greeting" doc:"How to greet, \"hello\" by default."`
}

type greetAttrs struct {
	Name  string `cty:"name" required:"true" doc:"Who to greet."`
	Token string `cty:"token" sensitive:"true" doc:"A secret the greeting carries."`
}

type greetOutputs struct {
	Said  string `cty:"said"`
	Token string `cty:"token" sensitive:"true"`
}

// greetPlan is the private data Plan hands to Apply; greetUndo the revert data.
type greetPlan struct{ Line string }
type greetUndo struct{ Name string }

var greetStep = &sdk.StepType[*greeter, greetAttrs, greetPlan, greetUndo]{
	Name:        "greet",
	Description: "Greets someone.",
	Outputs:     greetOutputs{},
	Plan: func(_ context.Context, c *sdk.Call[*greeter], a greetAttrs, _ *sdk.Prior[greetPlan, greetUndo]) sdk.Plan[greetPlan] {
		line := c.Settings.greeting + ", " + a.Name + " (" + a.Token + ")"
		return sdk.Plan[greetPlan]{Diff: "say: " + line, Private: greetPlan{line}}
	},
	Apply: func(_ context.Context, c *sdk.Call[*greeter], a greetAttrs, planned greetPlan, _ *sdk.Prior[greetPlan, greetUndo]) sdk.Apply[greetPlan, greetUndo] {
		c.Log.Printf("%s", planned.Line)
		return sdk.Apply[greetPlan, greetUndo]{
			Outputs: greetOutputs{Said: planned.Line, Token: a.Token},
			Revert:  &sdk.RevertData[greetUndo]{Description: "forget " + a.Name, Data: greetUndo{a.Name}},
		}
	},
	Revert: func(_ context.Context, c *sdk.Call[*greeter], _ greetAttrs, u sdk.Applied[greetUndo]) phases.Diagnostics {
		c.Log.Printf("goodbye, %s", u.Data.Name)
		return nil
	},
}

func newGreeter() *sdk.Provider[*greeter] {
	return &sdk.Provider[*greeter]{
		Name:     "greeter",
		Settings: greetBlock{},
		ConfigureFunc: func(_ context.Context, req providers.ConfigureRequest) (*greeter, phases.Diagnostics) {
			var b greetBlock
			if d := sdk.Decode(req, &b, nil); d.HasErrors() {
				return nil, d
			}
			if b.Greeting == "" {
				b.Greeting = "hello"
			}
			return &greeter{b.Greeting}, nil
		},
		Steps: []sdk.Step[*greeter]{greetStep},
	}
}

// A provider of one step type: the token, declared sensitive, is
// scrubbed from the diff and the log, and its output is marked.
func Example() {
	ctx := context.Background()
	p := newGreeter()
	p.Configure(ctx, providers.ConfigureRequest{Name: "greeter", Config: cty.EmptyObjectVal})
	cfg := cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("Ana"), "token": cty.StringVal("s3cret")})
	addr := phases.Address{Type: "greet", Name: "ana"}

	plan := p.Plan(ctx, providers.PlanRequest{Type: "greet", Addr: addr, Config: cfg, Action: providers.Create})
	fmt.Println(plan.Diff)
	var log strings.Builder
	r := p.Apply(ctx, providers.ApplyRequest{Type: "greet", Addr: addr, Config: cfg, Planned: plan.Private, Log: &log})
	fmt.Print(log.String())
	fmt.Println(r.Outputs.GetAttr("token").HasMark(phases.SensitiveMark), r.Revert.Description, string(r.Revert.Data))
	log.Reset()
	p.Revert(ctx, providers.RevertRequest{Type: "greet", Addr: addr, Config: cfg, Revert: *r.Revert, Log: &log})
	fmt.Print(log.String())
	// Output:
	// say: hello, Ana ((sensitive value))
	// hello, Ana ((sensitive value))
	// true forget Ana {"Name":"Ana"}
	// goodbye, Ana
}
