package providertest

import (
	"bytes"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// SameGenerated reports, as an error of t, that the schema migrate
// compiles in (compiled, decoded from a generated file) is not the one
// the provider derives from its step types (derived), rollback sentences
// included; regenerate is the command that writes the file again.
func SameGenerated(t testing.TB, derived, compiled phases.Schema, regenerate string) {
	t.Helper()
	want, err := sdk.EncodeSchema(derived)
	if err != nil {
		t.Fatalf("the derived schema does not encode: %v", err)
	}
	got, err := sdk.EncodeSchema(compiled)
	if err != nil {
		t.Fatalf("the compiled schema does not encode: %v", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	i := 0
	for i < len(gl) && i < len(wl) && bytes.Equal(gl[i], wl[i]) {
		i++
	}
	line := func(ls [][]byte) string {
		if i < len(ls) {
			return string(bytes.TrimSpace(ls[i]))
		}
		return "(end of file)"
	}
	t.Errorf("the generated schema is out of date: run %s\nline %d:\n  generated: %s\n  derived:   %s", regenerate, i+1, line(gl), line(wl))
}
