// Package examples carries the example runbooks into the lab's program (migrate-lab):
// Homelab is examples/homelab, the whole migration of the brief, which
// `migrate-lab demo` copies to a directory of its own and runs against the
// lab. The files are embedded one pattern at a time (homelab.go), the
// tracked ones only: state, kubeconfigs or rendered configs an earlier
// run may have left in a checkout never ship in the binary.
package examples
