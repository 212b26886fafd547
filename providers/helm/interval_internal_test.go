package helm

import (
	"testing"
	"time"
)

// TestReleasePollAsksSoonThenSparingly: a release ready after 0.5s is
// seen within a fifth of a second of it, and after a minute of waiting
// the cluster is asked no more than every two seconds.
func TestReleasePollAsksSoonThenSparingly(t *testing.T) {
	var at []time.Duration
	elapsed, wait := time.Duration(0), releasePoll.first
	for elapsed < time.Minute {
		at = append(at, elapsed)
		elapsed += wait
		wait = releasePoll.after(wait)
	}
	firstAfter := func(d time.Duration) time.Duration {
		for _, a := range at {
			if a >= d {
				return a
			}
		}
		return elapsed
	}
	if seen := firstAfter(500 * time.Millisecond); seen-500*time.Millisecond > 200*time.Millisecond {
		t.Errorf("a release ready at 0.5s is seen at %s", seen)
	}
	if n := len(at); n > 45 {
		t.Errorf("a minute of waiting asks %d times", n)
	}
	if got := releasePoll.after(time.Minute); got != 2*time.Second {
		t.Errorf("the interval grows past its most: %s", got)
	}
	if got := every(time.Second).after(time.Second); got != time.Second {
		t.Errorf("a constant interval changed: %s", got)
	}
}
