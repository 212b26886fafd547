package talos

import "time"

// The tests lose etcd on purpose, for good: a revert need not wait as
// long as on a node that may be booting.
func init() { etcdSettle = 2 * time.Second }
