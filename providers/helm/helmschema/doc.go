// Package helmschema is the schema of the helm provider: its type name, its
// step types and their attributes. It is pure data (phases and cty only),
// so that migrate can load and check runbooks that use the provider
// without linking the provider itself, which runs as the plugin program
// migrate-provider-helm (see providers/plugin).
package helmschema
