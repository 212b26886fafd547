// Package helmschema is the schema of the helm provider: its type name, its
// provider block and the attributes and outputs of its step types, as
// structs the SDK (providers/sdk) derives the schema from. It is pure data
// (phases, cty and the SDK only), so that migrate can load and check
// runbooks that use the provider without linking the provider itself, which
// runs as the plugin program migrate-provider-helm (see providers/plugin).
package helmschema
