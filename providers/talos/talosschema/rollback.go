package talosschema

// rollbacks say what rollback does to each step type, for the reference
// (migrate docs); prose only, so the provider program need not carry it.
var rollbacks = map[string]string{
	MachineConfig: "Re-applies the previous config through the same ladder (dry-run, TRY, verify, apply); it is kept in the state age-encrypted, so without an age identity the step is irreversible. A first install cannot be undone.",
	Bootstrap:     "Cannot be undone.",
	Kubeconfig:    "Removes the file.",
	Read:          "Nothing to undo.",
	ServiceHealth: "Nothing to undo.",
	Upgrade:       "Upgrades back to the previous version.",
}

func init() {
	for name, text := range rollbacks {
		st := Schema.StepTypes[name]
		st.Rollback = text
		Schema.StepTypes[name] = st
	}
}
