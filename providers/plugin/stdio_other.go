//go:build !linux

package plugin

import "os"

// protocolOutput is standard output itself where file descriptors cannot
// be rearranged the Linux way: libraries must not print to it.
func protocolOutput() (*os.File, error) { return os.Stdout, nil }
