package phases

import "encoding/json"

// RevertData is how to revert an applied step. A provider returns it from Apply,
// the state keeps it, and rollback hands it back to the provider.
type RevertData struct {
	// Description says in words what rollback will do ("run ./restore.sh",
	// "start instance old-vm"). Shown in the rollback plan.
	Description string `json:"description"`
	// Data is provider-defined; it must not contain secrets in clear.
	Data json.RawMessage `json:"data,omitempty"`
}
