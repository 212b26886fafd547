package etcdstate_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/state/etcdstate"
	"github.com/homelab-migrate/migrate/state/etcdstate/etcdtest"
	"github.com/homelab-migrate/migrate/state/statetest"
)

// putSnapshot stores b as the snapshot under cfg's prefix the way a
// writer does (one chunk, its meta and head), and journal entries after
// it (raw entries as EncodeEntry makes them).
func putSnapshot(t *testing.T, c *etcdtest.Cluster, cfg etcdstate.Config, lineage string, serial uint64, b []byte, entries ...[]byte) {
	t.Helper()
	ctx := context.Background()
	cli := c.Client()
	sum := sha256.Sum256(b)
	meta, _ := json.Marshal(map[string]any{"layout": 1, "lineage": lineage, "serial": serial, "generation": "0123456789abcdef",
		"chunks": 1, "bytes": len(b), "sha256": hex.EncodeToString(sum[:])})
	put := func(k, v string) {
		if _, err := cli.Put(ctx, cfg.Prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("snapshot/0123456789abcdef/000000", string(b))
	put("snapshot/meta", string(meta))
	for i, e := range entries {
		put(fmt.Sprintf("journal/%020d", serial+uint64(i)+1), string(e))
	}
	head, _ := json.Marshal(map[string]any{"serial": serial + uint64(len(entries)), "lineage": lineage})
	put("head", string(head))
}

// A state in etcd left by a format 2 writer (its snapshot and a journal
// entry after it) is read, and written as format 3 by the next writer as
// soon as it opens the state.
func TestFormat2StateRead(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	cfg := prefixed(t, c)
	golden, err := os.ReadFile("../testdata/format2/state.json")
	if err != nil {
		t.Fatal(err)
	}
	lineage, serial := "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0", uint64(77)
	entry := state.EncodeEntry(serial+1, lineage, time.Now(), []byte(
		`{"address":"exec.later","phase":"p0","status":"done","inverse":{"description":"run: undo","data":{"argv":["undo"]}},"record":{"k":"v"},"attempts":1}`))
	putSnapshot(t, c, cfg, lineage, serial, golden, entry)

	check := func(s *etcdstate.Store) {
		t.Helper()
		snap := s.Snapshot()
		if snap.Serial != serial+1 || len(snap.Steps) < 25 {
			t.Fatalf("read serial %d, %d records", snap.Serial, len(snap.Steps))
		}
		later := snap.Steps["exec.later"]
		if later == nil || later.Revert == nil || string(later.Revert.Data) != `{"argv":["undo"]}` || later.Facts["k"] != "v" {
			t.Errorf("exec.later: %+v", later)
		}
		up := snap.Steps["talos_upgrade.one"]
		if up == nil || up.Revert == nil || !strings.Contains(string(up.Revert.Data), `"etcd_snapshots":{"cp1":{"node":"cp1"`) {
			t.Errorf("talos_upgrade.one: %+v", up)
		}
		if f := snap.Steps["approval.one"].Facts; f["approved_by"] != "alice@laptop" {
			t.Errorf("approval.one's facts: %v", f)
		}
	}
	r, err := etcdstate.Open(ctx, cfg, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check(r)
	r.Close()

	w, err := etcdstate.Open(ctx, cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	check(w)
	// Written as 3 at once, the journal folded into it.
	var snap string
	for k, v := range dump(t, c.Client(), cfg.Prefix) {
		if strings.HasPrefix(k, cfg.Prefix+"journal/") {
			t.Errorf("%s left after the writer opened the state", k)
		}
		if strings.HasPrefix(k, cfg.Prefix+"snapshot/") && k != cfg.Prefix+"snapshot/meta" {
			snap += v
		}
	}
	if !strings.HasPrefix(snap, fmt.Sprintf("{\n  \"version\": %d,\n", state.CurrentVersion)) || strings.Contains(snap, `"inverse"`) || strings.Contains(snap, `"record"`) ||
		!strings.Contains(snap, `"revert":{"description":"run: undo"`) {
		t.Fatalf("the writer did not write format 3 when it opened the state:\n%.600s", snap)
	}
	w.Close()
	r, err = etcdstate.Open(ctx, cfg, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check(r)
	r.Close()
}

// A format 2 state with no journal after its snapshot is written in the
// current format when a writer opens it too, not left as it is until a
// step changes.
func TestFormat2StateWrittenAtOnce(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	golden, err := os.ReadFile("../testdata/format2/state.json")
	if err != nil {
		t.Fatal(err)
	}
	putSnapshot(t, c, cfg, "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0", 77, golden)
	w, err := etcdstate.Open(context.Background(), cfg, statetest.Writer("migrate run"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for k, v := range dump(t, c.Client(), cfg.Prefix) {
		if strings.HasPrefix(k, cfg.Prefix+"snapshot/") && k != cfg.Prefix+"snapshot/meta" && !strings.HasPrefix(v, fmt.Sprintf("{\n  \"version\": %d,\n", state.CurrentVersion)) {
			t.Fatalf("%s after a writer opened the state:\n%.300s", k, v)
		}
	}
}

// A state in a format newer than this build's is refused, untouched.
func TestNewerFormatRefused(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cfg := prefixed(t, c)
	b := []byte(fmt.Sprintf(`{"version": %d, "serial": 1, "lineage": "ab", "migrate_version": "9.0.0", "steps": {}}`, state.CurrentVersion+1))
	putSnapshot(t, c, cfg, "ab", 1, b)
	before := dump(t, c.Client(), cfg.Prefix)
	for _, opts := range []state.Options{{}, statetest.Writer("migrate run")} {
		_, err := etcdstate.Open(context.Background(), cfg, opts)
		var nv *state.NewerVersionError
		if !errors.As(err, &nv) || !strings.Contains(err.Error(), "upgrade migrate to 9.0.0 or later") {
			t.Fatalf("Open of a newer format: %v", err)
		}
	}
	after := dump(t, c.Client(), cfg.Prefix)
	delete(after, cfg.Prefix+"lock")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a refused Open changed the state")
	}
}
