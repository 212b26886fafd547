package helmschema

// rollbacks say what rollback does to each step type, for the reference
// (migrate docs); prose only, so the provider program need not carry it.
var rollbacks = map[string]string{
	Namespace: "Deletes the namespace only if this step created it, else restores its previous labels and annotations.",
	Release:   "Rolls back to the previous revision, or uninstalls what this step installed; the rollback plan says first when the release was changed outside migrate since.",
	Ready:     "Nothing to undo.",
	Manifest:  "Deletes the objects it created (annotated migrate/created-by); applies the others again as they were (their prior kept in the state, except a Secret's data, which cannot be restored).",
	Secret:    "Deletes a Secret it created; one that existed was copied in the cluster to NAME.migrate-orig, and is restored from that copy, which is then deleted.",
	Job:       "Deletes the Job object (propagation Background); what the Job did is not undone, and the plan lists it so.",
}

func init() {
	for name, text := range rollbacks {
		st := Schema.StepTypes[name]
		st.Rollback = text
		Schema.StepTypes[name] = st
	}
}
