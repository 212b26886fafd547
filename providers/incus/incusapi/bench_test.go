package incusapi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// responsiveInit replaces the test image's init for the speed comparison:
// `wait` lets the PWR trap run at once instead of after the current
// `sleep 1`, which would add 0-1 s of noise to every graceful stop.
const responsiveInit = `#!/bin/sh
trap 'exit 0' PWR TERM
mount -t proc proc /proc 2>/dev/null
while :; do sleep 1 & wait $!; done
`

// cycleContainer creates a stopped container with the responsive init.
func cycleContainer(t tb, c *Client) string {
	t.Helper()
	name := launch(t, c, "iapi-cycle", false, nil)
	f := filepath.Join(os.TempDir(), name+".init")
	if err := os.WriteFile(f, []byte(responsiveInit), 0o755); err != nil {
		t.Fatalf("%v", err)
	}
	defer os.Remove(f)
	incusCLI(t, "file", "push", "--mode", "0755", f, name+"/sbin/init")
	if err := c.SetState(context.Background(), name, InstanceStatePut{Action: "start"}); err != nil {
		t.Fatalf("start: %v", err)
	}
	return name
}

func clientCycle(c *Client, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Force: false}); err != nil {
		return err
	}
	return c.SetState(ctx, name, InstanceStatePut{Action: "start"})
}

func cliCycle(name string) error {
	if out, err := exec.Command("incus", "stop", name).CombinedOutput(); err != nil {
		return &cliError{err, out}
	}
	if out, err := exec.Command("incus", "start", name).CombinedOutput(); err != nil {
		return &cliError{err, out}
	}
	return nil
}

type cliError struct {
	err error
	out []byte
}

func (e *cliError) Error() string { return e.err.Error() + ": " + string(e.out) }

// BenchmarkStopStartCycle: a graceful stop + start through this client and
// through `incus stop NAME && incus start NAME`, on the same container.
//
//	go test -run '^$' -bench StopStartCycle -benchtime 10x ./providers/incus/incusapi/
func BenchmarkStopStartCycle(b *testing.B) {
	c := socketClient(b)
	name := cycleContainer(b, c)
	b.Run("client", func(b *testing.B) {
		for b.Loop() {
			if err := clientCycle(c, name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("incus-cli", func(b *testing.B) {
		for b.Loop() {
			if err := cliCycle(name); err != nil {
				b.Fatal(err)
			}
		}
	})
}
