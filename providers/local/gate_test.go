package local

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGateHoldsCommandUntilMigrateSaysGo: a command whose migrate died
// before it confirmed the start (the gate closes without a word) must not
// run at all; with the word it runs.
func TestGateHoldsCommandUntilMigrateSaysGo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		open bool
	}{{"migrate died", false}, {"migrate alive", true}} {
		marker := filepath.Join(dir, tc.name)
		cmd := exec.Command("touch", marker)
		g := gated(cmd)
		if g == nil {
			t.Fatal("touch was not gated")
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if tc.open {
			g.open()
		} else {
			g.abort() // what the kernel does to the pipe when migrate dies
		}
		err := cmd.Wait()
		_, statErr := os.Stat(marker)
		switch {
		case tc.open && (err != nil || statErr != nil):
			t.Errorf("%s: the command did not run: %v %v", tc.name, err, statErr)
		case !tc.open && statErr == nil:
			t.Errorf("%s: the command ran", tc.name)
		case !tc.open:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 137 {
				t.Errorf("%s: exit = %v, want 137", tc.name, err)
			}
		}
	}
	if gated(exec.Command("/no/such/program")) != nil {
		t.Error("a program that cannot start was gated (its error would be the shell's)")
	}
}
