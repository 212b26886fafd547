package incustest

import (
	"strings"
	"testing"
	"time"
)

func TestAcquireLimitsHolders(t *testing.T) {
	dir := t.TempDir()
	a, err := acquire(dir, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := acquire(dir, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(dir, 2, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "stayed taken") {
		t.Fatalf("a third holder of two slots: %v", err)
	}
	a.Close()
	c, err := acquire(dir, 2, time.Second)
	if err != nil {
		t.Fatalf("a slot freed by Close was not taken: %v", err)
	}
	b.Close()
	c.Close()
}

func TestHoldOncePerTopLevelTest(t *testing.T) {
	Hold(t)
	t.Run("sub", func(t *testing.T) {
		Hold(t) // would wait for a second slot if it took one
		if !held["TestHoldOncePerTopLevelTest"] {
			t.Fatal("the parent's slot is not recorded")
		}
	})
}
