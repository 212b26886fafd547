package main

import (
	"os"
	"runtime/debug"
	"strings"
)

// Memory: Go lets the heap grow to twice what was live at the last
// collection, so loading a big runbook (whose syntax trees are garbage a
// moment later) briefly needs twice its working set. migrate runs on the
// small servers it migrates, so it sets a soft memory limit instead: the
// collector works harder only when a runbook is big, and the limit grows
// with the runbook so that a huge one is not starved into collecting all
// the time. Under that limit the collector may let the heap grow to five
// times the live data (GOGC 400) before it runs: a small runbook then
// loads with few collections, and a big one is held by the limit anyway.
// GOMEMLIMIT or GOGC in the environment win.
const (
	gcPercent     = 400
	memoryFloor   = 120 << 20 // what every runbook may use
	memoryPerByte = 40        // heap per byte of runbook source, beyond the floor
)

// limitMemory sets the soft limit for the runbook in dir.
func limitMemory(dir string) {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOGC") != "" {
		return
	}
	var size int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	debug.SetMemoryLimit(max(memoryFloor, memoryPerByte*size))
	debug.SetGCPercent(gcPercent)
}
