package main

import "github.com/homelab-migrate/migrate/secret/agefile"

// inputKey is the key of the input hashes (agefile.InputHashKey) of the
// identity in MIGRATE_AGE_IDENTITY, nil without one.
func inputKey() []byte {
	ids, _ := agefile.Identities("")
	return agefile.InputHashKey(ids...)
}
