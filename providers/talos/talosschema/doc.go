// Package talosschema is the schema of the talos provider: its type name, its
// step types and their attributes, as the attributes structs the provider's
// handlers decode into (Schema is derived from them by providers/sdk). It
// is pure data (phases, cty and the SDK only),
// so that migrate can load and check runbooks that use the provider
// without linking the provider itself, which runs as the plugin program
// migrate-provider-talos (see providers/plugin).
package talosschema
