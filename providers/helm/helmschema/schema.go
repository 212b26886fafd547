package helmschema

import (
	_ "embed"

	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "helm"

// schemaJSON is the schema the provider derives from its step types,
// written by go generate ./providers/helm.
//
//go:embed schema.json
var schemaJSON []byte

// Schema describes the provider block and the step types, rollback
// sentences included, as the provider serves them.
var Schema = sdk.DecodeSchema(schemaJSON)
