package sdk

import "github.com/homelab-migrate/migrate/phases"

// RedactArgv is argv, the value of the list attribute attr, as revert data
// may keep it in the state: its sensitive elements are phases.Redacted,
// and secret lists their indices, so that a revert takes them from the
// configuration again (RestoreArgv).
func RedactArgv[S any](c *Call[S], attr string, argv []string) (kept []string, secret []int) {
	kept = make([]string, len(argv))
	for i, x := range argv {
		kept[i] = x
		if c.Sensitive(attr, i) {
			kept[i] = phases.Redacted
			secret = append(secret, i)
		}
	}
	return kept, secret
}

// RestoreArgv puts back into kept the elements at the indices secret,
// taken from argv (the attribute as the configuration gives it now); usable
// says whether an element of argv may be used (nil: any). It returns the
// first index argv cannot provide, or -1 when all are restored.
func RestoreArgv(kept []string, secret []int, argv []string, usable func(i int) bool) int {
	for _, i := range secret {
		if i >= len(argv) || usable != nil && !usable(i) || i >= len(kept) {
			return i
		}
		kept[i] = argv[i]
	}
	return -1
}
