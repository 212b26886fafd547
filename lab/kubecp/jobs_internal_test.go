package kubecp

import "testing"

// TestExpand: $(VAR) in command, args and env, as kubelet expands them.
func TestExpand(t *testing.T) {
	vars := map[string]string{"DIR": "/data", "EMPTY": ""}
	for in, want := range map[string]string{
		"$(DIR)/x":            "/data/x",
		"a$(EMPTY)b":          "ab",
		"$(UNKNOWN) $(DIR":    "$(UNKNOWN) $(DIR",
		"$$(DIR) cost $$5 $":  "$(DIR) cost $5 $",
		"echo $(date) $HOME":  "echo $(date) $HOME",
		"$(DIR)$(DIR)":        "/data/data",
		"no variables at all": "no variables at all",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
