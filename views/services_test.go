package views_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
	"github.com/homelab-migrate/migrate/views"
)

// A service's window is read from its stop steps' and serving check's
// facts: the earliest stop, the check's first pass after it; a reverted
// stop opens none; status prints the downtime, the time down so far, or
// that the old instance still runs, and --json carries it.
func TestServiceWindows(t *testing.T) {
	at := func(s string) string { return "2026-12-04T10:" + s + "Z" }
	rec := func(a string, st state.Status, fact, when string) *state.StepRecord {
		r := &state.StepRecord{Addr: addr(a), Status: st}
		if fact != "" {
			r.Facts = map[string]string{fact: at(when)}
		}
		return r
	}
	svc := func(name string, serving string, stops ...string) *phases.Service {
		s := &phases.Service{Name: name, Serving: addr(serving), MaxDowntime: 2 * time.Minute}
		for _, a := range stops {
			s.Stop = append(s.Stop, addr(a))
		}
		return s
	}
	services := []*phases.Service{
		svc("jellyfin", "http_check.jellyfin", "exec.stop_jellyfin", "exec.stop_db"),
		svc("frigate", "http_check.frigate", "exec.stop_frigate"),
		svc("matrix", "http_check.matrix", "exec.stop_matrix"),
		svc("samba", "http_check.samba", "exec.stop_samba"),
		svc("before", "http_check.before", "exec.stop_before"),
	}
	snap := &state.Snapshot{Steps: map[string]*state.StepRecord{}}
	for _, r := range []*state.StepRecord{
		rec("exec.stop_jellyfin", state.Done, phases.FactDownSince, "00:30"),
		rec("exec.stop_db", state.Done, phases.FactDownSince, "00:00"),
		rec("http_check.jellyfin", state.Done, phases.FactServingSince, "01:30"),
		rec("exec.stop_frigate", state.Done, phases.FactDownSince, "02:00"),
		rec("http_check.frigate", state.Failed, "", ""),
		rec("exec.stop_matrix", state.Reverted, phases.FactDownSince, "03:00"),
		rec("http_check.matrix", state.Reverted, phases.FactServingSince, "04:00"),
		rec("exec.stop_samba", state.Done, phases.FactDownSince, "05:00"),
		rec("http_check.samba", state.Done, phases.FactServingSince, "09:00"),
	} {
		snap.Steps[r.Addr.String()] = r
	}
	// Records made before the service was declared: their own times.
	t1, t2, t3 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC), time.Date(2026, 12, 4, 9, 0, 5, 0, time.UTC), time.Date(2026, 12, 4, 9, 3, 0, 0, time.UTC)
	snap.Steps["exec.stop_before"] = &state.StepRecord{Addr: addr("exec.stop_before"), Status: state.Done, StartedAt: &t1, FinishedAt: &t2}
	snap.Steps["http_check.before"] = &state.StepRecord{Addr: addr("http_check.before"), Status: state.Done, StartedAt: &t2, FinishedAt: &t3}
	got := views.ServiceWindows(services, snap)
	if j := got[0]; j.Downtime == nil || time.Duration(*j.Downtime) != 90*time.Second || j.DownSince.Format(time.RFC3339) != at("00:00") {
		t.Errorf("jellyfin = %+v, want down 1m30s from its first stop", j)
	}
	if f := got[1]; f.DownSince == nil || f.ServingSince != nil || f.Downtime != nil {
		t.Errorf("frigate = %+v, want down, not serving", f)
	}
	if m := got[2]; m.DownSince != nil || m.Downtime != nil {
		t.Errorf("matrix = %+v, want no window after its rollback", m)
	}
	if b := got[4]; b.Downtime == nil || time.Duration(*b.Downtime) != 3*time.Minute {
		t.Errorf("before = %+v, want down 3m0s by the records' own times", b)
	}
	s := &views.Status{Services: got}
	v, out, _ := newView()
	v.Status(s)
	text := out.String()
	for _, want := range []string{"Services", "jellyfin  down 1m30s", "max 2m0s", "frigate   down since", "so far", "matrix    not stopped", "samba     down 4m0s"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"downtime":"1m30s"`) || !strings.Contains(string(b), `"max_downtime":"2m0s"`) {
		t.Errorf("JSON lacks the downtime: %s", b)
	}
	var back views.Status
	if err := json.Unmarshal(b, &back); err != nil || back.Services[0].Downtime == nil || *back.Services[0].Downtime != *got[0].Downtime {
		t.Errorf("the JSON does not read back: %v %+v", err, back.Services)
	}
}
