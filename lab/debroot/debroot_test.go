package debroot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Root logs what the script says (that it builds, and how long it took)
// and returns the root it prints; a failing build fails with its words.
// (Stand-in scripts: the real one needs root and a minute or more.)
func TestRootLogsAndReturnsTheRoot(t *testing.T) {
	t.Setenv("MIGRATE_DEBIAN_ROOT", "")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := buildScript
	t.Cleanup(func() { buildScript = old })

	buildScript = []byte("echo 'debian-root: building a Debian bookworm root' >&2\necho 'debian-root: built in 61 s' >&2\necho " + dir + "\n")
	var mu sync.Mutex
	var lines []string
	got, err := Root(context.Background(), func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	})
	if err != nil || got != dir {
		t.Fatalf("Root: %q %v", got, err)
	}
	if log := strings.Join(lines, "\n"); !strings.Contains(log, "building a Debian bookworm root") || !strings.Contains(log, "built in 61 s") {
		t.Errorf("the log: %q", log)
	}

	buildScript = []byte("echo 'debian-root: debootstrap needs root' >&2\nexit 1\n")
	if _, err := Root(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "debootstrap needs root") {
		t.Errorf("a failed build: %v", err)
	}

	buildScript = []byte("echo /nonexistent\n")
	if _, err := Root(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "no root") {
		t.Errorf("a build printing no root: %v", err)
	}
}
