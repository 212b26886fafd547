package incustest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Env returns the environment variable key, or def when it is empty.
func Env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Where the daemon of scripts/incus-up.sh is; the script prints these
// variables, and the defaults are what it sets up.
var (
	Socket     = os.Getenv("INCUS_SOCKET") // "" is the default socket
	Image      = Env("INCUS_TEST_IMAGE", "migrate-busybox")
	HTTPS      = Env("INCUS_HTTPS", "127.0.0.1:8443")
	ServerCert = Env("INCUS_SERVER_CERT", "/var/lib/incus/server.crt")
	// Network is a managed bridge with DHCP; NetImage asks it for a lease
	// on eth0 (see the script for its MIGRATE_DHCP environment switch).
	Network  = Env("INCUS_TEST_NETWORK", "migratebr0")
	NetImage = Env("INCUS_TEST_NET_IMAGE", "migrate-busybox-dhcp")
)

// TB is the part of testing.TB the slot needs.
type TB interface {
	Helper()
	Name() string
	Fatalf(string, ...any)
	Cleanup(func())
}

// Slots is how many tests, across every test process of the machine, may
// use the daemon at once (INCUS_TEST_SLOTS; default 1). With 3, a freshly
// started Incus 6.0.4 stalled for 90 s in one run out of three; with 1,
// never in a row of runs (see doc.go).
var Slots = slots()

func slots() int {
	n, err := strconv.Atoi(Env("INCUS_TEST_SLOTS", "1"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

var (
	mu   sync.Mutex
	held = map[string]bool{} // top-level test names holding a slot
)

// Hold takes one of the machine's daemon slots for the test (and its
// subtests) until it ends, waiting for one to be free. A test that already
// holds one gets no second: that could deadlock.
func Hold(t TB) {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	mu.Lock()
	if held[top] {
		mu.Unlock()
		return
	}
	held[top] = true
	mu.Unlock()

	f, err := acquire(filepath.Join(os.TempDir(), "migrate-incus-test-slots"), Slots, 15*time.Minute)
	if err != nil {
		mu.Lock()
		delete(held, top)
		mu.Unlock()
		t.Fatalf("waiting for an Incus test slot: %v", err)
	}
	t.Cleanup(func() {
		f.Close() // closing drops the flock
		mu.Lock()
		delete(held, top)
		mu.Unlock()
	})
}

// acquire locks the first free one of n slot files in dir, polling until
// one is free or the wait is over. The lock dies with the process, so a
// killed test run leaves nothing held.
func acquire(dir string, n int, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		for i := range n {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), os.O_CREATE|os.O_RDWR, 0o666)
			if err != nil {
				return nil, err
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
				return f, nil
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("all %d slots in %s stayed taken for %s", n, dir, wait)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Lab reports whether the tests run against the lab's Incus host
// (lab/incushost, started by lab/cmd/incus-lab, which sets INCUS_LAB=1)
// instead of the real daemon. A test skips under the lab only for what
// lab/incushost's package doc lists as a difference, and says why.
func Lab() bool { return os.Getenv("INCUS_LAB") != "" }

// SkipInLab skips t under the lab, saying why.
func SkipInLab(t interface {
	Helper()
	Skipf(string, ...any)
}, why string) {
	t.Helper()
	if Lab() {
		t.Skipf("the lab's Incus host %s (see lab/incushost's package doc)", why)
	}
}
