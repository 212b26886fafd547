package incus_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// incus_sync in a busybox container standing in for the old VM: the
// helper runs with busybox's sh, find, stat, sha256sum and cp.

// sh runs a shell command in the instance, failing the test unless it
// exits with 0; its stdout.
func sh(t testing.TB, c *incusapi.Client, name, script string) string {
	t.Helper()
	code, out := execIn(t, c, name, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("sh -c %q in %s: exit %d: %s", script, name, code, out)
	}
	return out
}

func syncCfg(name, src, dst string, final bool, critical ...string) map[string]cty.Value {
	crit := cty.ListValEmpty(cty.String)
	if len(critical) > 0 {
		var vs []cty.Value
		for _, g := range critical {
			vs = append(vs, str(g))
		}
		crit = cty.ListVal(vs)
	}
	return map[string]cty.Value{"instance": str(name), "source": str(src), "destination": str(dst), "final": cty.BoolVal(final), "critical": crit}
}

func outInt(t testing.TB, r providers.ApplyResponse, name string) int64 {
	t.Helper()
	v := r.Outputs.GetAttr(name)
	n, _ := v.AsBigFloat().Int64()
	return n
}

// old is a date the test files are given, so that no pass takes them for
// files changed in its own second.
const old = "2024-01-02 03:04:05"

func TestSyncWarmThenFinal(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", true, nil)
	sh(t, c, name, `set -e
mkdir -p /var/lib/app/sub /var/lib/app/db
echo alpha > /var/lib/app/a.txt
echo bravo > /var/lib/app/sub/b.txt
echo gone > /var/lib/app/sub/gone.txt
echo 'database v1' > /var/lib/app/db/main.db
ln -s sub/b.txt /var/lib/app/link
find /var/lib/app -exec touch -h -d '`+old+`' {} +`)
	const src, dst = "/var/lib/app", "/mnt/data/apps/app.partial"
	warm := newStep(t, p, incus.Sync, "warm", syncCfg(name, src, dst, false, "*.db"))
	plan := warm.mustPlan(nil)
	wantContains(t, "warm plan", plan.Diff, "warm pass", "source: 29 B in 4 files; critical: 1 files, 12 B (left for the final pass)", "/var/lib/migrate-sync/%2Fmnt%2Fdata%2Fapps%2Fapp.partial.manifest", "expected to copy: 17 B (all but the critical files, at most)")
	if plan.CopyBytes != 17 {
		t.Errorf("the warm pass expects to copy %d bytes, want 17 (all but the database)", plan.CopyBytes)
	}
	w := warm.mustApply(plan.Private, nil)
	if got := outInt(t, w, "copied_files"); got != 3 {
		t.Errorf("warm pass copied %d files, want 3 (the database left)", got)
	}
	if code, _ := execIn(t, c, name, "test", "-e", dst+"/db/main.db"); code == 0 {
		t.Errorf("the warm pass copied the critical file")
	}
	// Between the passes (the service still runs): a changed file, a new
	// one, a deleted one, and the database changed without changing its
	// size or mtime.
	sh(t, c, name, `set -e
echo 'alpha, longer' > /var/lib/app/a.txt
echo new > /var/lib/app/new.txt
rm /var/lib/app/sub/gone.txt
echo 'database v2' > /var/lib/app/db/main.db
touch -d '`+old+`' /var/lib/app/db/main.db`)
	final := newStep(t, p, incus.Sync, "final", syncCfg(name, src, dst, true, "*.db"))
	fp := final.mustPlan(nil)
	// The warm pass's manifest is there: the database and 1% of the rest.
	if want := int64(12); fp.CopyBytes != want { // 12 B of database, 1% of 24 B rounds to 0
		t.Errorf("the final pass after a warm one expects to copy %d bytes, want %d\n%s", fp.CopyBytes, want, fp.Diff)
	}
	f := final.mustApply(fp.Private, nil)
	if got := outInt(t, f, "copied_files"); got != 3 {
		t.Errorf("final pass copied %d files, want 3 (a.txt, new.txt, the database)", got)
	}
	if got := outInt(t, f, "files"); got != 4 {
		t.Errorf("final pass: files = %d, want 4", got)
	}
	got := sh(t, c, name, "cd "+dst+" && cat a.txt new.txt db/main.db && readlink link && test ! -e sub/gone.txt && echo gone")
	if want := "alpha, longer\nnew\ndatabase v2\nsub/b.txt\ngone\n"; got != want {
		t.Errorf("the destination after the final pass:\n%s\nwant:\n%s", got, want)
	}
	if m := f.Outputs.GetAttr("manifest").AsString(); len(m) != 64 {
		t.Errorf("manifest output %q", m)
	}
	// Rollback: the final pass leaves the copy to the warm pass's.
	if f.Revert == nil || !strings.Contains(f.Revert.Description, "nothing") {
		t.Errorf("final pass revert: %+v", f.Revert)
	}
	final.revert(f.Revert)
	warm.revert(w.Revert)
	if got := sh(t, c, name, "ls /mnt/data/apps/ | wc -l"); strings.TrimSpace(got) != "0" {
		t.Errorf("the warm pass's rollback left %s entries in /mnt/data/apps", got)
	}
}

func TestSyncDestinationChangedFails(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", true, nil)
	sh(t, c, name, `set -e; mkdir -p /srv/app; for i in 1 2 3; do echo $i > /srv/app/f$i; done; find /srv/app -exec touch -d '`+old+`' {} +`)
	warm := newStep(t, p, incus.Sync, "warm", syncCfg(name, "/srv/app", "/srv/copy", false))
	warm.mustApply(nil, nil)
	sh(t, c, name, "rm /srv/copy/f2")
	final := newStep(t, p, incus.Sync, "final", syncCfg(name, "/srv/app", "/srv/copy", true))
	r, log := final.apply(ctxT(t, 2*time.Minute), nil, nil)
	t.Logf("final pass log:\n%s", log)
	wantDiag(t, r.Diagnostics, "Destination Changed", `removed: "f2"`)
	if code, _ := execIn(t, c, name, "test", "-e", "/srv/copy/f2"); code == 0 {
		t.Errorf("the final pass copied onto a destination that changed")
	}
}

func TestSyncHostileNames(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", true, nil)
	// A newline, quotes, a leading dash, a byte that is not UTF-8, and a
	// terminal escape.
	sh(t, c, name, `set -e
mkdir -p /srv/app
cd /srv/app
printf 1 > "$(printf 'new\nline')"
printf 2 > "it's \"quoted\""
printf 3 > -rf
printf 4 > "$(printf 'latin\377')"
printf 5 > "$(printf 'esc\033[2J')"
mkdir "$(printf 'dir\nx')"
printf 6 > "$(printf 'dir\nx')/-"
find /srv/app -exec touch -d '`+old+`' {} +`)
	warm := newStep(t, p, incus.Sync, "warm", syncCfg(name, "/srv/app", "/srv/copy", false))
	warm.mustApply(nil, nil)
	final := newStep(t, p, incus.Sync, "final", syncCfg(name, "/srv/app", "/srv/copy", true))
	f := final.mustApply(nil, nil)
	if got := outInt(t, f, "files"); got != 6 {
		t.Errorf("files = %d, want 6", got)
	}
	got := sh(t, c, name, `cd /srv/copy && cat "$(printf 'new\nline')" "it's \"quoted\"" ./-rf "$(printf 'latin\377')" "$(printf 'esc\033[2J')" "$(printf 'dir\nx')/-"`)
	if got != "123456" {
		t.Errorf("the copies hold %q, want 123456", got)
	}
	sh(t, c, name, `rm /srv/copy/"$(printf 'latin\377')" /srv/copy/"$(printf 'esc\033[2J')"`)
	r, _ := final.apply(ctxT(t, 2*time.Minute), nil, nil)
	wantDiag(t, r.Diagnostics, "Destination Changed", `"latin\xff"`, `"esc\x1b[2J"`)
	for _, d := range r.Diagnostics {
		if strings.ContainsAny(d.Detail, "\x1b\xff") {
			t.Errorf("a raw control or non-UTF-8 byte reached the diagnostic: %q", d.Detail)
		}
	}
}

func TestSyncRefusedPaths(t *testing.T) {
	p := provider(t, nil)
	for _, tc := range []struct{ src, dst, why string }{
		{"var/lib/app", "/mnt/copy", "must be absolute"},
		{"/var/lib/app", "/mnt/../copy", `"."`},
		{"/", "/mnt/copy", "root of the instance"},
		{"/var/lib/app", "/", "root of the instance"},
		{"/var/lib/app", "/var/lib/app/copy", "inside its source"},
		{"/var/lib/app", "/var/lib/app", "inside its source"},
		{"/var/lib/app/data", "/var/lib/app/", "inside its destination"},
	} {
		s := newStep(t, p, incus.Sync, "refused", syncCfg("any", tc.src, tc.dst, false))
		r := s.plan(nil)
		if !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), tc.why) {
			t.Errorf("%s -> %s: %v; want an error saying %s", tc.src, tc.dst, r.Diagnostics.Err(), tc.why)
		}
	}
	s := newStep(t, p, incus.Sync, "glob", syncCfg("any", "/a", "/b", false, "[x"))
	wantDiag(t, s.plan(nil).Diagnostics, "Invalid Attribute Value", "critical")
	warmAfter := syncCfg("any", "/a", "/b", false)
	warmAfter["after_warm"] = cty.True
	wantDiag(t, newStep(t, p, incus.Sync, "warm", warmAfter).plan(nil).Diagnostics, "Invalid Attribute Value", "for a final pass")
}

func TestSyncPlanUnreachableInstance(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", false, nil) // stopped: no exec
	s := newStep(t, p, incus.Sync, "warm", syncCfg(name, "/srv/app", "/srv/copy", false))
	r := s.plan(nil)
	if r.Diagnostics.HasErrors() {
		t.Fatalf("plan: %v", r.Diagnostics.Err())
	}
	wantContains(t, "plan", r.Diff, "source: unknown", name)
}

// The figure of the issue: the final pass (the downtime's copy) after a
// warm pass, with 1% of the data changed in between, against the final
// pass alone onto an empty destination (a cold copy), side by side on
// one ~320 MB tree: 300 files of 1 MB and two 10 MB databases marked
// critical. `make bench` runs it.
func BenchmarkSyncFinal(b *testing.B) {
	c := client(b)
	p := provider(b, nil)
	name := launch(b, c, "syncbench", true, nil)
	sh(b, c, name, `set -e
mkdir -p /srv/app/media /srv/app/db
cd /srv/app/media
i=0; while [ $i -lt 300 ]; do dd if=/dev/urandom of=f$i bs=1M count=1 2>/dev/null; i=$((i+1)); done
dd if=/dev/urandom of=/srv/app/db/main.db bs=1M count=10 2>/dev/null
dd if=/dev/urandom of=/srv/app/db/index.db bs=1M count=10 2>/dev/null
find /srv/app -exec touch -d '`+old+`' {} +`)
	crit := "*.db"
	figures := map[string]time.Duration{} // the mean final pass of each side's last run
	n := 0
	final := func(b *testing.B, dst string) time.Duration {
		s := newStep(b, p, incus.Sync, "final", syncCfg(name, "/srv/app", dst, true, crit))
		start := time.Now()
		r := s.mustApply(nil, nil)
		d := time.Since(start)
		b.StopTimer()
		b.Logf("final pass onto %s: %s, %d of %d bytes copied", dst, d.Round(time.Millisecond), outInt(b, r, "copied_bytes"), outInt(b, r, "bytes"))
		sh(b, c, name, "rm -rf "+dst+" /var/lib/migrate-sync")
		b.StartTimer()
		return d
	}
	side := func(kind string, warm bool) func(*testing.B) {
		return func(b *testing.B) {
			var total time.Duration
			for range b.N {
				n++
				dst := fmt.Sprintf("/srv/%s%d", kind, n)
				if warm {
					b.StopTimer()
					newStep(b, p, incus.Sync, "warm", syncCfg(name, "/srv/app", dst, false, crit)).mustApply(nil, nil)
					// 1% of the 300 MB changes while the service runs: three
					// files rewritten.
					sh(b, c, name, `set -e; for i in 7 150 299; do dd if=/dev/urandom of=/srv/app/media/f$i bs=1M count=1 2>/dev/null; done`)
					b.StartTimer()
				}
				total += final(b, dst)
			}
			figures[kind] = total / time.Duration(b.N)
			b.ReportMetric((total / time.Duration(b.N)).Seconds(), "s/final")
		}
	}
	b.Run("after-warm", side("warm", true))
	b.Run("cold", side("cold", false))
	if warm, cold := figures["warm"], figures["cold"]; warm > 0 && cold > 0 {
		b.Logf("final pass after a warm pass: %s; cold: %s; ratio %.3f (%.1fx faster)", warm.Round(time.Millisecond), cold.Round(time.Millisecond), warm.Seconds()/cold.Seconds(), cold.Seconds()/warm.Seconds())
	}
}

// A final pass with no warm pass before it is a cold copy: it copies
// everything, verifies, and its rollback removes what it made.
func TestSyncColdFinalAndRead(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", true, nil)
	sh(t, c, name, `set -e; mkdir -p /srv/app/d; head -c 1000 /dev/zero > /srv/app/a; echo 2 > /srv/app/d/b`)
	// Planned: a cold pass copies the whole tree; one said to come after
	// a warm pass (that has not run yet) 1% of it.
	cold := newStep(t, p, incus.Sync, "final", syncCfg(name, "/srv/app", "/srv/copy", true)).mustPlan(nil)
	afterCfg := syncCfg(name, "/srv/app", "/srv/copy", true)
	afterCfg["after_warm"] = cty.True
	after := newStep(t, p, incus.Sync, "final", afterCfg).mustPlan(nil)
	if cold.CopyBytes != 1002 || after.CopyBytes != 10 {
		t.Errorf("expected copies: cold %d, want 1002; after a warm pass %d, want 10\n%s\n%s", cold.CopyBytes, after.CopyBytes, cold.Diff, after.Diff)
	}
	final := newStep(t, p, incus.Sync, "final", syncCfg(name, "/srv/app", "/srv/copy", true))
	r := final.mustApply(nil, nil)
	if got := outInt(t, r, "copied_files"); got != 2 {
		t.Errorf("cold final pass copied %d files, want 2", got)
	}
	// Interrupted, a pass is applied again; done, it is left alone.
	if o := p.Read(ctxT(t, time.Minute), providers.ReadRequest{Type: incus.Sync, Addr: final.addr, Config: final.cfg, Prior: priorOf(r), InFlight: true}).Observation; o != providers.Absent {
		t.Errorf("in-flight read: %v, want absent", o)
	}
	if o := final.read(priorOf(r)).Observation; o != providers.Unknown {
		t.Errorf("read: %v, want unknown", o)
	}
	wantContains(t, "revert description", r.Revert.Description, "remove the copy /srv/copy")
	final.revert(r.Revert)
	if got := sh(t, c, name, "ls /srv"); strings.TrimSpace(got) != "app" {
		t.Errorf("after the cold final pass's rollback /srv holds %q, want only app", got)
	}
}

// A run killed during the warm pass: the helper goes on in the
// instance; the pass applied again (as the in-flight read makes the
// engine do) waits for it, goes on from what it copied, and the final
// pass verifies.
func TestSyncKilledWarmPassResumes(t *testing.T) {
	c := client(t)
	p := provider(t, nil)
	name := launch(t, c, "sync", true, nil)
	sh(t, c, name, `set -e; mkdir -p /srv/app; cd /srv/app
i=0; while [ $i -lt 60 ]; do dd if=/dev/urandom of=f$i bs=1M count=2 2>/dev/null; i=$((i+1)); done
find /srv/app -exec touch -d '`+old+`' {} +`)
	warm := newStep(t, p, incus.Sync, "warm", syncCfg(name, "/srv/app", "/srv/copy", false))
	ctx, cancel := context.WithCancel(context.Background())
	// Killed once the copies started: the temporary names show up.
	go func() {
		defer cancel()
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if code, _ := execIn(t, c, name, "sh", "-c", "ls -a /srv/copy | grep -q migrate-tmp"); code == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	r, log := warm.apply(ctx, nil, nil)
	t.Logf("killed warm pass: %v\n%s", r.Diagnostics.Err(), log)
	if !r.Diagnostics.HasErrors() {
		t.Skip("the warm pass finished before it could be killed")
	}
	if r.Revert == nil || !strings.Contains(string(r.Revert.Data), `"operation"`) {
		t.Fatalf("the killed pass's revert data does not keep its helper's operation: %+v", r.Revert)
	}
	again := warm.mustApply(nil, priorOf(r))
	if got := outInt(t, again, "files"); got != 60 {
		t.Errorf("files = %d, want 60", got)
	}
	f := newStep(t, p, incus.Sync, "final", syncCfg(name, "/srv/app", "/srv/copy", true)).mustApply(nil, nil)
	if got := outInt(t, f, "copied_files"); got != 0 {
		t.Errorf("the final pass copied %d files, want 0 (the resumed warm pass copied them all)", got)
	}
	warm.revert(again.Revert)
}

// The figure, as a person would see it: a service's window of
// downtime as the engine measures it (from the start of its stop step to
// its serving check's first pass, testdata/window), with a warm pass
// before the stop and 1% of the data written in between, against no warm
// pass (a cold copy in the window), side by side on one ~320 MB tree:
// 300 files of 1 MB and two 10 MB databases marked critical. The new
// instance answers at once: the window is the stop and the copy. `make
// bench` runs it.
func BenchmarkServiceWindow(b *testing.B) {
	c := client(b)
	name := launch(b, c, "window", true, nil)
	sh(b, c, name, `set -e
mkdir -p /srv/app/media /srv/app/db
cd /srv/app/media
i=0; while [ $i -lt 300 ]; do dd if=/dev/urandom of=f$i bs=1M count=1 2>/dev/null; i=$((i+1)); done
dd if=/dev/urandom of=/srv/app/db/main.db bs=1M count=10 2>/dev/null
dd if=/dev/urandom of=/srv/app/db/index.db bs=1M count=10 2>/dev/null
find /srv/app -exec touch -d '`+old+`' {} +`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	b.Cleanup(srv.Close)
	window := func(b *testing.B, warm bool) time.Duration {
		b.Helper()
		sh(b, c, name, "rm -rf /srv/copy /var/lib/migrate-sync")
		rb := loadRunbook(b, "testdata/window", "instance="+name, "serving_url="+srv.URL, fmt.Sprintf("warm=%t", warm))
		dir := b.TempDir()
		if _, err := runPhase(b, rb, dir, "move"); err != nil {
			b.Fatal(err)
		}
		st, err := state.Open(dir, state.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		w := views.ServiceWindows(rb.Services, st.Snapshot())
		if len(w) != 1 || w[0].Downtime == nil {
			b.Fatalf("no window measured: %+v", w)
		}
		return time.Duration(*w[0].Downtime)
	}
	var warm, cold time.Duration
	for i := 0; i < b.N; i++ {
		warm += window(b, true)
		cold += window(b, false)
	}
	warm, cold = warm/time.Duration(b.N), cold/time.Duration(b.N)
	b.ReportMetric(warm.Seconds(), "warm-window-s")
	b.ReportMetric(cold.Seconds(), "cold-window-s")
	b.ReportMetric(warm.Seconds()/cold.Seconds(), "warm/cold")
	b.Logf("the service's window: %s with a warm pass, %s without (%.2f)", warm.Round(time.Millisecond), cold.Round(time.Millisecond), warm.Seconds()/cold.Seconds())
}
