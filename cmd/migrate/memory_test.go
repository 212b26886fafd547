package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestLimitMemoryGrowsWithTheRunbook(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	defer debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	limitMemory(dir)
	if got := debug.SetMemoryLimit(-1); got != memoryFloor {
		t.Fatalf("limit for a 1 MiB runbook = %d, want the floor %d", got, memoryFloor)
	}
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Fatalf("GOGC under the limit = %d, want %d", got, gcPercent)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.hcl"), make([]byte, 10<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), make([]byte, 50<<20), 0o644) // not a runbook file
	limitMemory(dir)
	if got, want := debug.SetMemoryLimit(-1), int64(memoryPerByte*(11<<20)); got != want {
		t.Fatalf("limit for 11 MiB of runbook = %d, want %d", got, want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "1GiB")
	limitMemory(dir)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("GOMEMLIMIT in the environment was overridden: %d", got)
	}
}
