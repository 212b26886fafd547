package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/runbooks"
	"github.com/homelab-migrate/migrate/state"
)

// TestSelectPrecedence: the flag wins over the environment, which wins
// over the runbook's block, which wins over the local files.
func TestSelectPrecedence(t *testing.T) {
	block := &phases.BackendConfig{Type: "etcd", Endpoints: []string{"h:1"}, Prefix: "block/"}
	for _, c := range []struct {
		name   string
		choice Choice
		want   string
	}{
		{"flag", Choice{Flag: "etcd://h:1/flag/", Env: "etcd://h:1/env/", Block: block}, "flag/"},
		{"env", Choice{Env: "etcd://h:1/env/", Block: block}, "env/"},
		{"block", Choice{Block: block}, "block/"},
		{"local", Choice{}, ""},
	} {
		b, err := Select(c.choice)
		if err != nil || b.Prefix != c.want || (c.want == "") != (b.Type == "local") {
			t.Errorf("%s: %+v %v, want prefix %q", c.name, b, err, c.want)
		}
	}
	if _, err := Select(Choice{Flag: "consul://h", Env: "etcd://h:1/p/"}); err == nil || !strings.HasPrefix(err.Error(), "--backend: ") {
		t.Errorf("a bad flag is named as the flag: %v", err)
	}
	if _, err := Select(Choice{Env: "consul://h"}); err == nil || !strings.HasPrefix(err.Error(), EnvURL+": ") {
		t.Errorf("a bad environment URL is named as %s: %v", EnvURL, err)
	}
	unknown := &phases.BackendConfig{Type: "etcd", Unknown: []string{"prefix"}}
	if _, err := Select(Choice{Block: unknown}); err == nil || !strings.Contains(err.Error(), "without a value for prefix") {
		t.Errorf("a block with unknown values: %v", err)
	}
}

// TestSelectCredentials: an etcd user needs a password, which comes from
// the environment (never a URL) and goes to etcd backends only.
func TestSelectCredentials(t *testing.T) {
	if _, err := Select(Choice{Flag: "etcd://ana@h:1/p/"}); err == nil || !strings.Contains(err.Error(), `user "ana" needs a password`) || !strings.Contains(err.Error(), EnvPassword) {
		t.Errorf("a user without a password: %v", err)
	}
	b, err := Select(Choice{Flag: "etcd://ana@h:1/p/", Password: "s3cret-canary"})
	if err != nil || b.Password != "s3cret-canary" {
		t.Errorf("the password of the environment: %+v %v", b, err)
	}
	if strings.Contains(Describe(b, ""), "s3cret-canary") {
		t.Errorf("Describe shows the password: %s", Describe(b, ""))
	}
	if b, _ := Select(Choice{Password: "s3cret-canary"}); b.Password != "" {
		t.Errorf("a local backend was given the password")
	}
	block := &phases.BackendConfig{Type: "etcd", Endpoints: []string{"h:1"}, Prefix: "p/", Username: "ana", Password: "block's"}
	if b, err := Select(Choice{Block: block}); err != nil || b.Password != "block's" {
		t.Errorf("the block's own password: %+v %v", b, err)
	}
	// Without TLS by its own choice, every plan says so, naming the
	// password's user.
	b, _ = Parse("etcd://ana@h:1/p/?insecure=true", "x")
	if w := Warning(WithPassword(b, "pw")); !strings.Contains(w, `the password of user "ana"`) || strings.Contains(w, "pw ") {
		t.Errorf("Warning: %q", w)
	}
	if w := Warning(&phases.BackendConfig{Type: "local"}); w != "" {
		t.Errorf("a local backend warned: %q", w)
	}
	if MinLockTTL != runbooks.MinLockTTL {
		t.Errorf("MinLockTTL %s, the runbook's block allows %s", MinLockTTL, runbooks.MinLockTTL)
	}
}

func locked() state.Options {
	return state.Options{MigrateVersion: "test", Lock: state.NewLockInfo("test")}
}

func local(dir string) Backend { return New(&phases.BackendConfig{Type: "local"}, dir) }

// writeState leaves a state of one done step in dir.
func writeState(t *testing.T, dir, step string) *state.Snapshot {
	t.Helper()
	st, err := local(dir).Open(context.Background(), locked())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := phases.ParseAddress(step)
	if err := st.Checkpoint(&state.StepRecord{Addr: a, Phase: "main", Status: state.Done, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	snap := st.Snapshot()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestDeferredLocksLate: until Begin the state is read only, unlocked and
// not created; Begin takes the lock, and refuses a state another writer
// changed since it was read.
func TestDeferredLocksLate(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "st")
	d, err := OpenDeferred(ctx, local(dir), state.Options{MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the state directory was created before Begin: %v", err)
	}
	a, _ := phases.ParseAddress("exec.a")
	if err := d.Checkpoint(&state.StepRecord{Addr: a, Phase: "main", Status: state.Done}); !errors.Is(err, state.ErrReadOnly) {
		t.Errorf("a write before Begin: %v, want ErrReadOnly", err)
	}
	readyErr := errors.New("no log")
	if _, err := d.Begin(ctx, locked(), "run", func() error { return readyErr }); !errors.Is(err, readyErr) {
		t.Errorf("Begin whose ready fails: %v", err)
	}
	if info, _ := local(dir).ReadLock(ctx); info != nil {
		t.Errorf("the lock stayed after a failed Begin: %+v", info)
	}
	w, err := d.Begin(ctx, locked(), "run", nil)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := local(dir).ReadLock(ctx); info == nil || info.ID != w.LockInfo().ID {
		t.Errorf("Begin did not take the lock: %+v", info)
	}
	if err := d.Checkpoint(&state.StepRecord{Addr: a, Phase: "main", Status: state.Done, Attempts: 1}); err != nil {
		t.Errorf("a write after Begin: %v", err)
	}
	// While it is held, another deferred session is refused at once.
	if _, err := OpenDeferred(ctx, local(dir), state.Options{}); !errors.As(err, new(*state.LockedError)) {
		t.Errorf("a second session while the lock is held: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// Another writer between the read and Begin.
	d, err = OpenDeferred(ctx, local(dir), state.Options{MigrateVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	writeState(t, dir, "exec.b")
	_, err = d.Begin(ctx, locked(), "rollback", nil)
	if err == nil || !strings.Contains(err.Error(), "changed while this rollback was being planned") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Begin on a state changed meanwhile: %v", err)
	}
	if info, _ := local(dir).ReadLock(ctx); info != nil {
		t.Errorf("the refused Begin left the lock: %+v", info)
	}
}

// TestCopy: push/pull copies the whole state; a source without a state,
// the same backend, and a target of another lineage (unless force) are
// refused without creating or changing anything.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	src, dst, empty := local(filepath.Join(base, "src")), local(filepath.Join(base, "dst")), local(filepath.Join(base, "empty"))
	snap := writeState(t, src.Dir, "exec.a")
	if _, err := Copy(ctx, empty, dst, locked(), false); err == nil || !strings.Contains(err.Error(), "there is no state in") {
		t.Errorf("a copy of nothing: %v", err)
	}
	for _, b := range []Backend{empty, dst} {
		if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
			t.Errorf("a refused copy created %s", b.Dir)
		}
	}
	if _, err := Copy(ctx, src, src, locked(), false); err == nil || !strings.Contains(err.Error(), "already in") {
		t.Errorf("a copy onto itself: %v", err)
	}
	got, err := Copy(ctx, src, dst, locked(), false)
	if err != nil || got.Lineage != snap.Lineage {
		t.Fatalf("Copy: %+v %v", got, err)
	}
	st, err := dst.Open(ctx, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Snapshot(); s.Lineage != snap.Lineage || len(s.Steps) != 1 {
		t.Errorf("the copy holds %+v", s)
	}
	st.Close()
	other := local(filepath.Join(base, "other"))
	writeState(t, other.Dir, "exec.z")
	if _, err := Copy(ctx, other, dst, locked(), false); err == nil || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("a copy over another lineage: %v", err)
	}
	if _, err := Copy(ctx, other, dst, locked(), true); err != nil {
		t.Errorf("a forced copy over another lineage: %v", err)
	}
	for _, b := range []Backend{src, dst, other} {
		if info, _ := b.ReadLock(ctx); info != nil {
			t.Errorf("%s is still locked", b)
		}
	}
}
