// Package deps checks the direction of the project's imports: which of
// its packages each package may import (rules, as data, in
// deps_test.go), and which it may never depend on even through another
// one. It has no code of its own; `make depcheck` runs it.
package deps
