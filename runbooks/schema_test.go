package runbooks_test

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// testSchemas resemble the local provider, plus a talos provider that needs
// a configuration block.
func testSchemas() map[string]phases.Schema {
	return map[string]phases.Schema{
		"local": {
			StepTypes: map[string]phases.StepType{
				"exec": {
					Attributes: map[string]phases.Attribute{
						"command": {Type: cty.List(cty.String), Required: true},
						"env":     {Type: cty.Map(cty.String)},
						"dir":     {Type: cty.String},
						"revert":  {Type: cty.List(cty.String)},
						"creates": {Type: cty.String},
					},
					Outputs: map[string]cty.Type{"exit_code": cty.Number},
				},
				"wait": {
					Attributes: map[string]phases.Attribute{
						"duration": {Type: cty.String, Required: true},
					},
				},
				"approval": {
					Attributes: map[string]phases.Attribute{
						"message": {Type: cty.String, Required: true},
					},
				},
				"http_check": {
					Attributes: map[string]phases.Attribute{
						"url":      {Type: cty.String, Required: true},
						"status":   {Type: cty.Number},
						"timeout":  {Type: cty.String},
						"interval": {Type: cty.String},
						"headers":  {Type: cty.Map(cty.String), Sensitive: true},
					},
					CanCheck: true,
				},
			},
		},
		"talos": {
			Provider: phases.Block{Attributes: map[string]phases.Attribute{
				"version":   {Type: cty.String, Required: true},
				"endpoints": {Type: cty.List(cty.String)},
				"token":     {Type: cty.String, Sensitive: true},
			}},
			StepTypes: map[string]phases.StepType{
				"talos_kubeconfig": {
					Attributes: map[string]phases.Attribute{
						"out": {Type: cty.String},
					},
					Outputs: map[string]cty.Type{"path": cty.String},
				},
				"talos_read": {
					Attributes: map[string]phases.Attribute{
						"path":   {Type: cty.String, Required: true},
						"expect": {Type: cty.String},
					},
					CheckOnly: true,
				},
			},
		},
	}
}
