package main

import (
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
)

// TestApproveTakesGroupedAddresses: --approve names an approval step of
// a group by its whole address, with or without the call's key, as the
// plan prints it; a group prefix without a step is refused, saying how
// one is written.
func TestApproveTakesGroupedAddresses(t *testing.T) {
	t.Parallel()
	got, err := parseApprovals([]string{`group.app["jellyfin"].approval.go`, "group.db.approval.dump", `approval.cutover`})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []phases.Address{
		{Group: "app", GroupKey: "jellyfin", Type: "approval", Name: "go"},
		{Group: "db", Type: "approval", Name: "dump"},
		{Type: "approval", Name: "cutover"},
	} {
		if !got[want] {
			t.Errorf("--approve did not read %s: %v", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("--approve read %v, want 3 addresses", got)
	}
	for _, bad := range []string{`group.app["jellyfin"]`, "group.app", `group.app[jellyfin].approval.go`} {
		if _, err := parseApprovals([]string{bad}); err == nil || !strings.Contains(err.Error(), "--approve") || !strings.Contains(err.Error(), "group.") {
			t.Errorf("--approve %s: %v, want refused with how a grouped address is written", bad, err)
		}
	}
}
