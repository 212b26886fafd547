package talosschema

import (
	_ "embed"

	"github.com/homelab-migrate/migrate/providers/sdk"
)

// TypeName is the provider type under which cmd/migrate registers Factory.
const TypeName = "talos"

// GenSecretsArg is the argument that makes the talos program write a new
// secrets bundle to its output instead of serving (migrate secrets gen
// talos): migrate itself does not carry Talos's libraries.
const GenSecretsArg = "gen-secrets"

// GenTalosconfigArg, followed by a context name, makes the talos program
// read a secrets bundle on its input and write the talosconfig of an
// administrator of that cluster (migrate secrets gen talos).
const GenTalosconfigArg = "gen-talosconfig"

// schemaJSON is the schema the provider derives from its step types,
// written by go generate ./providers/talos.
//
//go:embed schema.json
var schemaJSON []byte

// Schema describes the provider block and the step types, rollback
// sentences included, as the provider serves them.
var Schema = sdk.DecodeSchema(schemaJSON)

// UpgradePatchArg, followed by a Talos version and a file name, makes the
// talos program read a machine-config patch on its input and write, as
// JSON, a PatchUpgrade: the patch rewritten into that release's documents
// (migrate patches upgrade, migrate init --talos-version).
const UpgradePatchArg = "upgrade-patch"

// PatchUpgrade is a patch rewritten for a release: New is the patch
// itself when nothing moved (Diff empty). Moved and Left say, for a
// person, each key moved ("FIELD (line N) -> KIND") and each key the
// release rejects that stays ("FIELD (line N): what to do").
type PatchUpgrade struct {
	New   []byte   `json:"new"`
	Diff  string   `json:"diff,omitempty"`
	Moved []string `json:"moved,omitempty"`
	Left  []string `json:"left,omitempty"`
}
