package statetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// Store is what a backend's Open returns.
type Store interface {
	state.Manager
	Lineage() string
	LockInfo() *state.LockInfo
	Import(snap *state.Snapshot, force bool) error
}

// Backend is one state location, new and empty for each test.
type Backend struct {
	// Open opens the state (read-only when opts.Lock is nil).
	Open     func(opts state.Options) (Store, error)
	ReadLock func() (*state.LockInfo, error)
	Unlock   func(id string) error
	// Dump returns everything the backend stores of the state (file or
	// key names to contents), to see that reading writes nothing.
	Dump func() map[string]string
}

// Run runs the suite; newBackend makes a fresh location for each test.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T, Backend)
	}{
		{"CheckpointThenReopen", checkpointThenReopen},
		{"RecordIsVisibleToReaders", recordVisible},
		{"PersistFolds", persistFolds},
		{"ReadOnlyNeverWrites", readOnlyNeverWrites},
		{"SecondWriterRefusedNamingHolder", secondWriter},
		{"Import", importRules},
		{"Unlock", unlock},
		{"ConcurrentCheckpoints", concurrent},
		{"Copies", copies},
		{"BadRecordsRefused", badRecords},
		{"ReaderDuringWrites", readerDuringWrites},
		{"MoveRenamesARecord", moves},
		{"GroupedAddresses", grouped},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, newBackend(t)) })
	}
}

// Writer is the Options of a writer running command.
func Writer(command string) state.Options {
	return state.Options{Lock: &state.LockInfo{Command: command}, MigrateVersion: "test"}
}

// Rec is a record of the step at address a.
func Rec(a string, status state.Status) *state.StepRecord {
	addr, err := phases.ParseAddress(a)
	if err != nil {
		panic(err)
	}
	return &state.StepRecord{Addr: addr, Phase: "main", Status: status, Attempts: 1}
}

// OpenW opens b for writing or fails the test.
func OpenW(t testing.TB, b Backend, command string) Store {
	t.Helper()
	s, err := b.Open(Writer(command))
	if err != nil {
		t.Fatalf("Open for writing: %v", err)
	}
	return s
}

// OpenR opens b read-only or fails the test.
func OpenR(t testing.TB, b Backend) Store {
	t.Helper()
	s, err := b.Open(state.Options{})
	if err != nil {
		t.Fatalf("Open read-only: %v", err)
	}
	return s
}

// Checkpoint checkpoints recs or fails the test.
func Checkpoint(t testing.TB, s state.Manager, recs ...*state.StepRecord) {
	t.Helper()
	for _, r := range recs {
		if err := s.Checkpoint(r); err != nil {
			t.Fatalf("Checkpoint(%s): %v", r.Addr, err)
		}
	}
}

func closeOK(t testing.TB, s state.Manager) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func checkpointThenReopen(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	lineage := l.Lineage()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(lineage) {
		t.Fatalf("lineage %q, want 128 random bits in hex", lineage)
	}
	if r := OpenR(t, b); r.Lineage() != lineage {
		t.Fatalf("read-only Open sees lineage %q, want %q: the state must exist from the writer's Open on", r.Lineage(), lineage)
	}
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	a := Rec("exec.a", state.Done)
	a.StartedAt, a.FinishedAt = &now, &now
	a.Outputs = json.RawMessage(`{"value":"x","type":"string"}`)
	a.Facts = map[string]string{"approved_by": "alice"}
	Checkpoint(t, l, Rec("exec.a", state.Running), a, Rec("exec.b", state.Failed))
	if s := l.Snapshot(); s.Serial != 3 || len(s.Steps) != 2 {
		t.Fatalf("serial %d, %d steps; want 3, 2", s.Serial, len(s.Steps))
	}
	closeOK(t, l)
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := l.Checkpoint(Rec("exec.c", state.Done)); !errors.Is(err, state.ErrClosed) {
		t.Fatalf("Checkpoint after Close: %v, want ErrClosed", err)
	}
	r := OpenR(t, b)
	s := r.Snapshot()
	if s.Serial != 3 || s.Lineage != lineage || s.MigrateVersion != "test" {
		t.Fatalf("reopened: serial %d lineage %q migrate_version %q", s.Serial, s.Lineage, s.MigrateVersion)
	}
	got, ok := r.Step(a.Addr)
	if !ok || !reflect.DeepEqual(got, a) {
		t.Fatalf("exec.a reopened = %+v, want %+v", got, a)
	}
	// A writer goes on from there.
	w := OpenW(t, b, "migrate run")
	if w.Lineage() != lineage || w.Snapshot().Serial != 3 {
		t.Fatalf("writer reopened: lineage %q serial %d", w.Lineage(), w.Snapshot().Serial)
	}
	Checkpoint(t, w, Rec("exec.c", state.Done))
	closeOK(t, w)
	if s := OpenR(t, b).Snapshot(); s.Serial != 4 || len(s.Steps) != 3 {
		t.Fatalf("serial %d, %d steps; want 4, 3", s.Serial, len(s.Steps))
	}
}

func recordVisible(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	defer l.Close()
	if err := l.CheckpointUnsynced(Rec("exec.a", state.Running)); err != nil {
		t.Fatal(err)
	}
	got, ok := OpenR(t, b).Step(Rec("exec.a", state.Done).Addr)
	if !ok || got.Status != state.Running {
		t.Fatalf("a reader sees %+v, want the running record", got)
	}
}

func persistFolds(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	for i := range 5 {
		Checkpoint(t, l, Rec(fmt.Sprintf("exec.s%d", i), state.Done))
	}
	before := b.Dump()
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Serial != 5 {
		t.Fatalf("Persist changed the serial to %d", s.Serial)
	}
	after := b.Dump()
	if reflect.DeepEqual(before, after) {
		t.Fatal("Persist wrote nothing")
	}
	if err := l.Persist(); err != nil {
		t.Fatal(err)
	}
	if again := b.Dump(); !reflect.DeepEqual(again, after) {
		t.Fatal("a Persist with nothing new wrote again")
	}
	Checkpoint(t, l, Rec("exec.s0", state.Reverted))
	if s := OpenR(t, b).Snapshot(); s.Serial != 6 || s.Steps["exec.s0"].Status != state.Reverted || len(s.Steps) != 5 {
		t.Fatalf("after Persist and a checkpoint: serial %d, %d steps, s0 %s", s.Serial, len(s.Steps), s.Steps["exec.s0"].Status)
	}
	closeOK(t, l)
}

func readOnlyNeverWrites(t *testing.T, b Backend) {
	before := b.Dump()
	r := OpenR(t, b)
	if s := r.Snapshot(); s.Serial != 0 || s.Lineage != "" || len(s.Steps) != 0 {
		t.Fatalf("state of an empty location: %+v", s)
	}
	if r.LockInfo() != nil {
		t.Fatal("a read-only Open reports a lock")
	}
	if err := r.Checkpoint(Rec("exec.a", state.Done)); !errors.Is(err, state.ErrReadOnly) {
		t.Fatalf("Checkpoint read-only: %v, want ErrReadOnly", err)
	}
	if err := r.CheckpointUnsynced(Rec("exec.a", state.Done)); !errors.Is(err, state.ErrReadOnly) {
		t.Fatalf("Record read-only: %v, want ErrReadOnly", err)
	}
	if err := r.Persist(); !errors.Is(err, state.ErrReadOnly) {
		t.Fatalf("Persist read-only: %v, want ErrReadOnly", err)
	}
	if err := r.Import(&state.Snapshot{Lineage: "c0ffee00c0ffee00c0ffee00c0ffee00", Steps: map[string]*state.StepRecord{}}, true); !errors.Is(err, state.ErrReadOnly) {
		t.Fatalf("Import read-only: %v, want ErrReadOnly", err)
	}
	closeOK(t, r)
	if after := b.Dump(); !reflect.DeepEqual(before, after) {
		t.Fatalf("a read-only Open wrote:\nbefore %v\nafter  %v", before, after)
	}
	// An existing state with checkpoints not yet folded: seen, untouched.
	w := OpenW(t, b, "migrate run")
	Checkpoint(t, w, Rec("exec.a", state.Done), Rec("exec.b", state.Running))
	before = b.Dump()
	r = OpenR(t, b)
	if s := r.Snapshot(); s.Serial != 2 || s.Steps["exec.b"].Status != state.Running {
		t.Fatalf("read-only: serial %d, steps %v", s.Serial, s.Steps)
	}
	closeOK(t, r)
	if after := b.Dump(); !reflect.DeepEqual(before, after) {
		t.Fatal("a read-only Open of an existing state wrote")
	}
	closeOK(t, w)
}

func secondWriter(t *testing.T, b Backend) {
	holder := OpenW(t, b, "migrate run --all")
	id := holder.LockInfo().ID
	start := time.Now()
	_, err := b.Open(Writer("migrate rollback"))
	var le *state.LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second Open: %v, want a LockedError", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("second Open took %v: it must fail at once", d)
	}
	h := le.Holder
	if h.ID != id || h.PID != os.Getpid() || h.Command != "migrate run --all" || h.Host == "" || h.Created.IsZero() {
		t.Fatalf("holder %+v", h)
	}
	for _, want := range []string{fmt.Sprint("pid ", os.Getpid()), "migrate run --all", h.User + "@" + h.Host, "migrate state unlock " + id} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if info, err := b.ReadLock(); err != nil || info == nil || info.ID != id {
		t.Fatalf("ReadLock: %+v, %v", info, err)
	}
	// Readers are not held back, and the holder still writes.
	closeOK(t, OpenR(t, b))
	Checkpoint(t, holder, Rec("exec.a", state.Done))
	closeOK(t, holder)
	if info, err := b.ReadLock(); info != nil || err != nil {
		t.Fatalf("ReadLock after Close: %+v, %v", info, err)
	}
	next := OpenW(t, b, "migrate rollback")
	if s := next.Snapshot(); s.Serial != 1 {
		t.Fatalf("next writer sees serial %d, want 1", s.Serial)
	}
	closeOK(t, next)
}

func importRules(t *testing.T, b Backend) {
	src := &state.Snapshot{Serial: 7, Lineage: "c0ffee00c0ffee00c0ffee00c0ffee00", Steps: map[string]*state.StepRecord{}}
	for i := range 3 {
		r := Rec(fmt.Sprintf("exec.s%d", i), state.Done)
		src.Steps[r.Addr.String()] = r
	}
	w := OpenW(t, b, "migrate state push")
	// A new, empty state takes any lineage.
	if err := w.Import(src, false); err != nil {
		t.Fatalf("Import into an empty state: %v", err)
	}
	if w.Lineage() != src.Lineage || w.Snapshot().Serial != 7 {
		t.Fatalf("after Import: lineage %s serial %d", w.Lineage(), w.Snapshot().Serial)
	}
	Checkpoint(t, w, Rec("exec.s3", state.Done)) // serial 8
	older := *src
	if err := w.Import(&older, false); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Import of an older serial: %v, want a refusal saying the target is newer", err)
	}
	other := &state.Snapshot{Serial: 99, Lineage: "deadbeefdeadbeefdeadbeefdeadbeef", Steps: map[string]*state.StepRecord{}}
	if err := w.Import(other, false); err == nil || !strings.Contains(err.Error(), "another state") {
		t.Fatalf("Import of another lineage: %v, want a refusal", err)
	}
	if s := w.Snapshot(); s.Serial != 8 || s.Lineage != src.Lineage {
		t.Fatalf("a refused Import changed the state: serial %d lineage %s", s.Serial, s.Lineage)
	}
	newer := w.Snapshot()
	newer.Serial = 9
	if err := w.Import(newer, false); err != nil {
		t.Fatalf("Import of a newer serial of the same lineage: %v", err)
	}
	Checkpoint(t, w, Rec("exec.s4", state.Done))
	closeOK(t, w)
	if s := OpenR(t, b).Snapshot(); s.Serial != 10 || len(s.Steps) != 5 {
		t.Fatalf("reopened after Import: serial %d, %d steps", s.Serial, len(s.Steps))
	}
	w = OpenW(t, b, "migrate state push --force")
	if err := w.Import(other, true); err != nil {
		t.Fatalf("forced Import: %v", err)
	}
	closeOK(t, w)
	if s := OpenR(t, b).Snapshot(); s.Serial != 99 || s.Lineage != other.Lineage || len(s.Steps) != 0 {
		t.Fatalf("after a forced Import: serial %d lineage %s", s.Serial, s.Lineage)
	}
}

func unlock(t *testing.T, b Backend) {
	w := OpenW(t, b, "migrate run")
	id := w.LockInfo().ID
	if err := b.Unlock("wrong"); err == nil || !strings.Contains(err.Error(), id) {
		t.Fatalf("Unlock with the wrong ID: %v, want a refusal naming %s", err, id)
	}
	if info, err := b.ReadLock(); err != nil || info == nil || info.ID != id {
		t.Fatalf("after a refused Unlock: %+v, %v", info, err)
	}
	closeOK(t, w)
	if err := b.Unlock(id); err == nil || !strings.Contains(err.Error(), "not locked") {
		t.Fatalf("Unlock of an unlocked state: %v", err)
	}
}

func concurrent(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	const workers, each = 8, 15
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := Rec(fmt.Sprintf("exec.w%d", w), state.Running)
				r.Attempts = i + 1
				if err := l.Checkpoint(r); err != nil {
					t.Error(err)
					return
				}
				if got, ok := l.Step(r.Addr); !ok || got.Attempts != i+1 {
					t.Errorf("Step(%s) after its checkpoint: %v %v", r.Addr, got, ok)
				}
			}
		})
	}
	wg.Go(func() {
		for range 3 {
			if err := l.Persist(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	closeOK(t, l)
	s := OpenR(t, b).Snapshot()
	if s.Serial != workers*each || len(s.Steps) != workers {
		t.Fatalf("serial %d, %d steps; want %d, %d", s.Serial, len(s.Steps), workers*each, workers)
	}
	for k, r := range s.Steps {
		if r.Attempts != each {
			t.Errorf("%s: attempts %d, want the last one, %d", k, r.Attempts, each)
		}
	}
}

func copies(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	defer l.Close()
	r := Rec("exec.a", state.Done)
	r.Facts = map[string]string{"approved_by": "alice@laptop"}
	r.Outputs = json.RawMessage(`{"value":1,"type":"number"}`)
	Checkpoint(t, l, r)
	r.Facts["approved_by"] = "mallory"
	r.Outputs[10] = '9'
	got, _ := l.Step(r.Addr)
	if got.Facts["approved_by"] != "alice@laptop" || string(got.Outputs) != `{"value":1,"type":"number"}` {
		t.Fatalf("Checkpoint kept the caller's record, not a copy: %+v", got)
	}
	got.Facts["approved_by"] = "eve"
	s := l.Snapshot()
	s.Steps["exec.a"].Outputs[10] = '7'
	s.Steps["exec.b"] = Rec("exec.b", state.Done)
	again, _ := l.Step(r.Addr)
	if again.Facts["approved_by"] != "alice@laptop" || string(again.Outputs) != `{"value":1,"type":"number"}` || len(l.Snapshot().Steps) != 1 {
		t.Fatal("Step/Snapshot returned shared data")
	}
	if _, ok := l.Step(Rec("exec.none", state.Done).Addr); ok {
		t.Fatal("Step of an unknown address reports ok")
	}
}

func badRecords(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	defer l.Close()
	bad := Rec("exec.a", state.Done)
	bad.Outputs = json.RawMessage(`{not json`)
	for name, r := range map[string]*state.StepRecord{
		"nil":        nil,
		"no address": {Status: state.Done},
		"no status":  {Addr: Rec("exec.a", state.Done).Addr},
		"bad json":   bad,
	} {
		if err := l.Checkpoint(r); err == nil {
			t.Errorf("Checkpoint(%s) succeeded", name)
		}
	}
	Checkpoint(t, l, Rec("exec.a", state.Done))
	if s := l.Snapshot(); s.Serial != 1 {
		t.Fatalf("serial %d, want 1", s.Serial)
	}
}

// readerDuringWrites: a read-only Open while a writer checkpoints and
// persists always sees a consistent state, never an older one.
func readerDuringWrites(t *testing.T, b Backend) {
	l := OpenW(t, b, "migrate run")
	const n = 100
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := l.Checkpoint(Rec(fmt.Sprintf("exec.s%d", i%7), state.Done)); err != nil {
				t.Error(err)
				return
			}
			if i%10 == 0 {
				if err := l.Persist(); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	var last uint64
	reads := 0
	for reading := true; reading; reads++ {
		select {
		case <-done:
			reading = false
		default:
		}
		r, err := b.Open(state.Options{})
		if err != nil {
			t.Fatalf("read-only Open during writes: %v", err)
		}
		s := r.Snapshot()
		r.Close()
		if s.Serial < last {
			t.Fatalf("serial went back from %d to %d", last, s.Serial)
		}
		last = s.Serial
	}
	closeOK(t, l)
	if s := OpenR(t, b).Snapshot(); s.Serial != n {
		t.Fatalf("serial %d, want %d", s.Serial, n)
	}
	t.Logf("%d reads during %d checkpoints", reads, n)
}

// moves: state.Move carries a record to a new address in one
// checkpoint, seen by a reader of the journal and after a fold; a move
// onto a record is refused, a move of nothing does nothing.
func moves(t *testing.T, b Backend) {
	w := OpenW(t, b, "migrate run")
	a := Rec("exec.a", state.Done)
	a.InputHash = "h1"
	b1 := Rec("exec.b", state.Done)
	b1.Upstream = map[string]string{"exec.a": "w1"} // b depends on a
	Checkpoint(t, w, a, b1)
	from, to := a.Addr, Rec("exec.c", state.Done).Addr
	if err := state.Move(w, from, to, "other"); err != nil {
		t.Fatalf("Move: %v", err)
	}
	check := func(who string, s *state.Snapshot) {
		t.Helper()
		c := s.Steps["exec.c"]
		if s.Serial != 3 || len(s.Steps) != 2 || s.Steps["exec.a"] != nil || c == nil || c.InputHash != "h1" || c.Phase != "other" || c.Addr != to || c.MovedFrom != "" {
			t.Fatalf("%s: serial %d, steps %v; want serial 3, exec.b and exec.c (was exec.a)", who, s.Serial, s.Steps)
		}
		if up := s.Steps["exec.b"].Upstream; len(up) != 1 || up["exec.c"] != "w1" {
			t.Fatalf("%s: exec.b's upstream worlds %v, want exec.a's under its new address exec.c", who, up)
		}
	}
	check("writer", w.Snapshot())
	check("reader of the journal", OpenR(t, b).Snapshot())
	if err := state.Move(w, Rec("exec.b", state.Done).Addr, to, ""); err == nil || !strings.Contains(err.Error(), "exec.c has a record already") {
		t.Fatalf("Move onto a record: %v, want refused", err)
	}
	if err := state.Move(w, from, Rec("exec.d", state.Done).Addr, ""); err != nil {
		t.Fatalf("Move of no record: %v, want nothing done", err)
	}
	check("writer after refusals", w.Snapshot())
	closeOK(t, w)
	check("after the fold", OpenR(t, b).Snapshot())
}

// grouped: records of steps of group calls (group.CALL.TYPE.NAME,
// group.CALL["KEY"].TYPE.NAME["KEY2"]) are kept, journalled and folded
// under their whole address, worlds upstream keyed by it too; a record
// moves into a group, into a call instance and out again.
func grouped(t *testing.T, b Backend) {
	w := OpenW(t, b, "migrate run")
	vol := Rec(`group.app["jellyfin"].incus_volume.data`, state.Done)
	vol.InputHash = "hv"
	rel := Rec(`group.app["jellyfin"].helm_release.app["a.b"]`, state.Done)
	rel.Upstream = map[string]string{vol.Addr.String(): "wv"}
	plain := Rec("exec.a", state.Done)
	plain.InputHash = "ha"
	Checkpoint(t, w, vol, rel, plain, Rec(`group.app.exec.x`, state.Failed))
	keys := []string{`group.app["jellyfin"].incus_volume.data`, `group.app["jellyfin"].helm_release.app["a.b"]`, "exec.a", "group.app.exec.x"}
	has := func(who string, s *state.Snapshot, keys ...string) {
		t.Helper()
		if len(s.Steps) != len(keys) {
			t.Fatalf("%s: steps %v, want %q", who, s.Steps, keys)
		}
		for _, k := range keys {
			r := s.Steps[k]
			if r == nil || r.Addr.String() != k {
				t.Fatalf("%s: no record under %s (steps %v)", who, k, s.Steps)
			}
		}
		if up := s.Steps[keys[1]].Upstream; len(up) != 1 || up[keys[0]] != "wv" {
			t.Fatalf("%s: %s's upstream worlds %v, want %s's", who, keys[1], up, keys[0])
		}
	}
	has("writer", w.Snapshot(), keys...)
	has("reader of the journal", OpenR(t, b).Snapshot(), keys...)
	addr := func(s string) phases.Address { return Rec(s, state.Done).Addr }
	last := "exec.a"
	for _, to := range []string{"group.g.exec.a", `group.g["k"].exec.a`, "exec.b"} {
		if err := state.Move(w, addr(last), addr(to), ""); err != nil {
			t.Fatalf("Move %s to %s: %v", last, to, err)
		}
		keys[2] = to
		has("writer after moving "+last+" to "+to, w.Snapshot(), keys...)
		if r, _ := w.Step(addr(to)); r == nil || r.InputHash != "ha" {
			t.Fatalf("%s after the move: %+v, want exec.a's record", to, r)
		}
		last = to
	}
	// Upstream worlds follow a grouped record that moves.
	if err := state.Move(w, vol.Addr, addr(`group.app["emby"].incus_volume.data`), ""); err != nil {
		t.Fatal(err)
	}
	keys[0] = `group.app["emby"].incus_volume.data`
	has("writer after moving the volume", w.Snapshot(), keys...)
	closeOK(t, w)
	has("after the fold", OpenR(t, b).Snapshot(), keys...)
}
