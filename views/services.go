package views

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/state"
)

// ServiceStatus is one service's window of downtime as the state has it:
// from the start of the first of its stop steps (their FactDownSince) to
// the first pass of its serving check since (FactServingSince).
type ServiceStatus struct {
	Name    string   `json:"name"`
	Stops   []string `json:"stops"`
	Serving string   `json:"serving"`
	// DownSince is when the old instance's stop began; nil: not stopped.
	DownSince *time.Time `json:"down_since,omitempty"`
	// ServingSince is when the new instance's check first passed after
	// DownSince; nil: not serving yet.
	ServingSince *time.Time `json:"serving_since,omitempty"`
	// Downtime is ServingSince - DownSince, once both are known (0 when
	// the new one served before the old one stopped).
	Downtime *Duration `json:"downtime,omitempty"`
	// MaxDowntime is the runbook's limit; 0: none.
	MaxDowntime Duration `json:"max_downtime,omitempty"`
}

// Duration is a time.Duration written as Go writes it ("2m31s") in JSON.
type Duration time.Duration

// MarshalText writes d as time.Duration's String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// ServiceWindows are the runbook's services with their windows as the
// snapshot records them, in the order the runbook declares them.
func ServiceWindows(services []*phases.Service, snap *state.Snapshot) []ServiceStatus {
	var out []ServiceStatus
	for _, svc := range services {
		ss := ServiceStatus{Name: svc.Name, Serving: svc.Serving.String(), MaxDowntime: Duration(svc.MaxDowntime)}
		for _, a := range svc.Stop {
			ss.Stops = append(ss.Stops, a.String())
			if t := factTime(snap, a, phases.FactDownSince); t != nil && (ss.DownSince == nil || t.Before(*ss.DownSince)) {
				ss.DownSince = t
			}
		}
		if ss.DownSince != nil {
			if t := factTime(snap, svc.Serving, phases.FactServingSince); t != nil {
				ss.ServingSince = t
				d := Duration(max(0, t.Sub(*ss.DownSince)))
				ss.Downtime = &d
			}
		}
		out = append(out, ss)
	}
	return out
}

// factTime is the time a record's fact holds, nil when the record does
// not hold it: a step reverted since, or not run, holds none that counts.
// A record made before its service was declared (the runbook had no
// service block then) holds no fact; its own times stand in: a stop's
// start, a passing check's end (its last pass, which may be later than
// its first).
func factTime(snap *state.Snapshot, a phases.Address, fact string) *time.Time {
	if snap == nil {
		return nil
	}
	rec := snap.Steps[a.String()]
	if rec == nil || rec.Status == state.Reverted || rec.Status == state.Pending {
		return nil
	}
	if v, ok := rec.Facts[fact]; ok {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil
		}
		return &t
	}
	switch {
	case fact == phases.FactDownSince:
		return rec.StartedAt
	case rec.Status == state.Done:
		return rec.FinishedAt
	}
	return nil
}

// renderServices lists each service's window: its downtime once it
// serves again, how long it has been down while it is not, or that its
// old instance still runs; over its max_downtime in red.
func renderServices(bw *bufio.Writer, st styles, services []ServiceStatus, now time.Time) {
	if len(services) == 0 {
		return
	}
	fmt.Fprintln(bw, st.bold("Services")+st.dim(" (downtime: from the start of the old one's stop to the new one's first passing check)"))
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	over := make([]bool, len(services))
	for i, s := range services {
		text, when := "not stopped", ""
		var d time.Duration
		switch {
		case s.Downtime != nil:
			d = time.Duration(*s.Downtime)
			text = "down " + fmtDuration(d)
			when = s.DownSince.Local().Format("2006-01-02 15:04:05") + " to " + s.ServingSince.Local().Format("15:04:05")
		case s.DownSince != nil:
			d = now.Sub(*s.DownSince)
			text = "down since " + s.DownSince.Local().Format("2006-01-02 15:04:05") + " (" + fmtDuration(d) + " so far)"
		}
		limit := ""
		if s.MaxDowntime > 0 {
			limit = "max " + fmtDuration(time.Duration(s.MaxDowntime))
			over[i] = d > time.Duration(s.MaxDowntime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, text, when, limit)
	}
	tw.Flush()
	for i, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		line = strings.TrimRight(line, " ")
		switch {
		case over[i]:
			line = st.red(line)
		case services[i].Downtime == nil && services[i].DownSince != nil:
			line = st.yellow(line)
		}
		fmt.Fprintf(bw, "  %s\n", line)
	}
}

// renderServicePlans shows the windows of downtime the plan expects, each
// with the longest path of steps it adds up and where each figure comes
// from.
func renderServicePlans(w io.Writer, st styles, services []engine.ServicePlan) {
	if len(services) == 0 {
		return
	}
	fmt.Fprintln(w, st.bold("Expected downtime")+st.dim(" (from the start of each service's stop to its serving check; the longest path of steps between)"))
	for _, s := range services {
		limit := ""
		if s.Max > 0 {
			limit = st.dim(" (max " + fmtDuration(s.Max) + ")")
			if s.Expected > s.Max {
				limit = st.red(" (over its max " + fmtDuration(s.Max) + ")")
			}
		}
		fmt.Fprintf(w, "  %s: about %s%s\n", st.bold(s.Name), fmtDuration(s.Expected), limit)
		for _, t := range s.Terms {
			fmt.Fprintf(w, "    %s %s\n", t.Addr, st.dim(fmtDuration(t.Expected)+", "+t.Basis))
		}
	}
	fmt.Fprintln(w)
}
