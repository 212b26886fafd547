package home

import (
	"strings"
	"testing"
)

// TestRouter: reserved MACs get their address (whatever the case of the
// MAC); the others a dynamic one each, kept across leases; a removed
// reservation makes its MAC dynamic; another process's reservation (the
// file, as migrate-lab reserve writes it) counts from the next lease on;
// bad input is refused.
func TestRouter(t *testing.T) {
	dir := t.TempDir()
	r, err := newRouter(7, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.lease("10:66:6A:4D:16:50"); got != "127.7.200.50" {
		t.Fatalf("the node's reservation: %q", got)
	}
	if got := r.lease(RehearsalMAC); got != "127.7.200.51" {
		t.Fatalf("the rehearsal's reservation: %q", got)
	}
	a, b := r.lease("02:00:00:00:00:01"), r.lease("02:00:00:00:00:02")
	if a != "127.7.200.100" || b != "127.7.200.101" || r.lease("02:00:00:00:00:01") != a {
		t.Fatalf("dynamic leases: %q %q", a, b)
	}
	if err := r.reserve(NodeMAC, ""); err != nil {
		t.Fatal(err)
	}
	if got := r.lease(NodeMAC); got == "127.7.200.50" || got == "" {
		t.Fatalf("without its reservation the node got %q", got)
	}
	if err := r.reserve("not-a-mac", "127.7.200.9"); err == nil {
		t.Fatal("a bad MAC was reserved")
	}
	if err := r.reserve(NodeMAC, "somewhere"); err == nil {
		t.Fatal("a bad address was reserved")
	}

	// From outside, as migrate-lab reserve: the MAC as a user types it.
	if err := ReserveIn(dir, "10:66:6A:25:77:3C", "127.7.200.60"); err != nil {
		t.Fatal(err)
	}
	if got := r.lease("10:66:6a:25:77:3c"); got != "127.7.200.60" {
		t.Fatalf("a reservation made from outside: %q", got)
	}
	if err := ReserveIn(t.TempDir(), NodeMAC, "127.7.200.50"); err == nil || !strings.Contains(err.Error(), "no lab's router in") {
		t.Fatalf("a directory without a lab: %v", err)
	}
	// A lab started again in dir starts from the example's reservations.
	if r, err = newRouter(7, dir); err != nil || r.lease("10:66:6a:25:77:3c") == "127.7.200.60" || r.lease(NodeMAC) != "127.7.200.50" {
		t.Fatalf("a new lab's router: %v", err)
	}
}
