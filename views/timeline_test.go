package views_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/views"
)

const hostile = `exec.x["<b>\"&'</b>"]`

// sampleTimeline: a run killed at 10:02, resumed at 10:40 (a gap the
// axis breaks) and done at 10:45, then a rollback that failed; steps of
// phase A in parallel; two services with windows (one over its max, one
// still down) and one not stopped.
func sampleTimeline() *views.Timeline {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(m, s float64) time.Time {
		return t0.Add(time.Duration(m*float64(time.Minute) + s*float64(time.Second)))
	}
	tp := func(t time.Time) *time.Time { return &t }
	d := func(x time.Duration) *views.Duration { v := views.Duration(x); return &v }
	return &views.Timeline{
		Title:  "migrate report: <homelab> & co",
		Phases: []string{"A", "B", "C"},
		Sessions: []views.TimelineSession{
			{Command: "run", Start: at(0, 0), End: at(2, 0), Killed: true},
			{Command: "run", Start: at(40, 0), End: at(45, 0), Ended: "ok"},
			{Command: "rollback", Start: at(50, 0), End: at(51, 0), Ended: "exit code 1"},
		},
		Bars: []views.TimelineBar{
			{Phase: "A", Address: "exec.one", Attempt: 1, Start: at(0, 1), End: at(0, 30), Outcome: views.OutcomeDone},
			{Phase: "A", Address: hostile, Attempt: 1, Start: at(0, 2), End: at(0, 40), Outcome: views.OutcomeRetried},
			{Phase: "A", Address: hostile, Attempt: 2, Start: at(0, 41), End: at(1, 0), Outcome: views.OutcomeDone},
			{Phase: "A", Address: "exec.three", Attempt: 1, Start: at(0, 3), End: at(0, 20), Outcome: views.OutcomeFailed},
			{Phase: "B", Address: "exec.stop", Attempt: 1, Start: at(1, 0), End: at(1, 10), Outcome: views.OutcomeDone},
			{Phase: "B", Address: "wait.long", Attempt: 1, Start: at(1, 10), End: at(2, 0), Outcome: views.OutcomeKilled},
			{Phase: "B", Address: "wait.long", Start: at(40, 5), End: at(40, 5), Outcome: views.OutcomeAdopted},
			{Phase: "C", Address: "http_check.up", Check: true, Attempt: 1, Start: at(41, 0), End: at(42, 0), Outcome: views.OutcomeDone},
			{Phase: "B", Address: "exec.stop", Revert: true, Start: at(50, 10), End: at(50, 40), Outcome: views.OutcomeRevertFailed},
		},
		Services: []views.ServiceStatus{
			{Name: "jellyfin", DownSince: tp(at(1, 0)), ServingSince: tp(at(42, 0)), Downtime: d(41 * time.Minute), MaxDowntime: views.Duration(30 * time.Minute)},
			{Name: "photos<&>", DownSince: tp(at(44, 0))},
			{Name: "dns"},
		},
	}
}

// svgDoc is what a test reads of a timeline's SVG.
type svgDoc struct {
	lanes    []string
	bars     []map[string]string // their attributes, x and width of the rect added
	windows  []map[string]string
	sessions []map[string]string
	kills    int
	breaks   int
	labels   []string // of sessions
	texts    []string
}

// readSVG parses the first svg element in b, failing the test when it is
// not well-formed XML.
func readSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	i := bytes.Index(b, []byte("<svg"))
	j := bytes.LastIndex(b, []byte("</svg>"))
	if i < 0 || j < i {
		t.Fatalf("no svg in:\n%s", b)
	}
	dec := xml.NewDecoder(bytes.NewReader(b[i : j+len("</svg>")]))
	var doc svgDoc
	var cur map[string]string
	var inLabel bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			at := map[string]string{}
			for _, a := range el.Attr {
				at[a.Name.Local] = a.Value
			}
			inLabel = el.Name.Local == "text" && at["class"] == "session-label"
			switch {
			case el.Name.Local == "g" && at["class"] == "lane":
				doc.lanes = append(doc.lanes, at["data-phase"])
			case el.Name.Local == "g" && at["class"] == "bar":
				cur = at
				doc.bars = append(doc.bars, at)
			case el.Name.Local == "g" && at["class"] == "window":
				doc.windows = append(doc.windows, at)
			case el.Name.Local == "g" && at["class"] == "session":
				doc.sessions = append(doc.sessions, at)
			case el.Name.Local == "g" && at["class"] == "kill":
				doc.kills++
			case el.Name.Local == "g" && at["class"] == "break":
				doc.breaks++
			case el.Name.Local == "rect" && cur != nil:
				cur["x"], cur["width"], cur["y"] = at["x"], at["width"], at["y"]
				cur = nil
			}
		case xml.CharData:
			if inLabel {
				doc.labels = append(doc.labels, string(el))
			}
			doc.texts = append(doc.texts, string(el))
		case xml.EndElement:
			inLabel = false
		}
	}
	return doc
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return f
}

// TestTimelineSVG: the picture is well-formed, standing alone (no script,
// no link out), with a lane per phase, a bar per attempt, a window per
// stopped service (the one over its max in red), a line per session, the
// kill marked and the next run labelled resumed, the long gap broken;
// a step's address and the title with quotes and brackets are escaped;
// bars of a lane that overlap in time are in different rows.
func TestTimelineSVG(t *testing.T) {
	v, out, _ := newView()
	tl := sampleTimeline()
	if err := v.Report(tl, views.ReportSVG); err != nil {
		t.Fatal(err)
	}
	if p := os.Getenv("MIGRATE_TIMELINE_OUT"); p != "" {
		os.WriteFile(p, out.Bytes(), 0o644)
	}
	s := out.String()
	for _, bad := range []string{"<script", "href", "@import", "url(", "<b>"} {
		if strings.Contains(s, bad) {
			t.Errorf("the svg has %q", bad)
		}
	}
	doc := readSVG(t, out.Bytes())
	if strings.Join(doc.lanes, ",") != "A,B,C" {
		t.Errorf("lanes %v", doc.lanes)
	}
	if len(doc.bars) != len(tl.Bars) {
		t.Errorf("%d bars, want %d", len(doc.bars), len(tl.Bars))
	}
	found := false
	for _, b := range doc.bars {
		found = found || b["data-address"] == hostile
	}
	if !found {
		t.Errorf("no bar of %s", hostile)
	}
	if !strings.Contains(strings.Join(doc.texts, "\n"), "migrate report: <homelab> & co") {
		t.Error("the title is not in the svg's text")
	}
	// Bars never overlap in a lane's row.
	for i, a := range doc.bars {
		for _, b := range doc.bars[i+1:] {
			if a["data-phase"] != b["data-phase"] || a["data-row"] != b["data-row"] {
				continue
			}
			a0, a1 := num(t, a["x"]), num(t, a["x"])+num(t, a["width"])
			b0, b1 := num(t, b["x"]), num(t, b["x"])+num(t, b["width"])
			if a0 < b1 && b0 < a1 {
				t.Errorf("bars overlap: %v and %v", a, b)
			}
		}
	}
	rows := map[string]bool{}
	for _, b := range doc.bars {
		if b["data-phase"] == "A" {
			rows[b["data-row"]] = true
		}
	}
	if len(rows) < 3 {
		t.Errorf("phase A's three parallel steps in %d rows", len(rows))
	}
	if len(doc.windows) != 2 || doc.windows[0]["data-service"] != "jellyfin" || doc.windows[0]["data-over"] != "true" ||
		doc.windows[1]["data-service"] != "photos<&>" || doc.windows[1]["data-over"] != "false" {
		t.Errorf("windows %v", doc.windows)
	}
	if !strings.Contains(s, "jellyfin: down 41m0s, max 30m0s: OVER") || !strings.Contains(s, "photos&lt;&amp;&gt;: down ") || !strings.Contains(s, "still down") {
		t.Errorf("the windows' labels:\n%s", s)
	}
	if len(doc.sessions) != 3 || doc.sessions[0]["data-killed"] != "true" || doc.sessions[1]["data-resumed"] != "true" || doc.sessions[2]["data-command"] != "rollback" {
		t.Errorf("sessions %v", doc.sessions)
	}
	if doc.kills != 1 {
		t.Errorf("%d kills drawn, want 1", doc.kills)
	}
	if got := strings.Join(doc.labels, ","); got != "run,✕ killed,resumed run,rollback" {
		t.Errorf("session labels %q", got)
	}
	if doc.breaks != 1 {
		t.Errorf("%d breaks of the axis, want 1 (the 38 minutes between the kill and the resumed run)", doc.breaks)
	}
}

// TestTimelineHTML: the page stands alone (no script, nothing fetched),
// parses as XML, holds the picture, a row per service and one per
// session, the killed one said so.
func TestTimelineHTML(t *testing.T) {
	v, out, _ := newView()
	if err := v.Report(sampleTimeline(), views.ReportHTML); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, bad := range []string{"<script", "href", "src=", "@import", "url(", "<b>"} {
		if strings.Contains(s, bad) {
			t.Errorf("the page has %q", bad)
		}
	}
	readSVG(t, out.Bytes())
	dec := xml.NewDecoder(strings.NewReader(s))
	tables := map[string][][]string{}
	var table string
	var row []string
	var cell *strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the page is not well-formed: %v\n%s", err, s)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "table":
				for _, a := range el.Attr {
					if a.Name.Local == "class" {
						table = a.Value
					}
				}
			case "tr":
				row = nil
			case "td":
				cell = &strings.Builder{}
			}
		case xml.CharData:
			if cell != nil {
				cell.Write(el)
			}
		case xml.EndElement:
			switch el.Name.Local {
			case "td":
				row = append(row, cell.String())
				cell = nil
			case "tr":
				if row != nil {
					tables[table] = append(tables[table], row)
				}
			}
		}
	}
	svc := tables["services"]
	if len(svc) != 3 || svc[0][0] != "jellyfin" || svc[0][3] != "41m0s (over the max)" || svc[0][4] != "30m0s" ||
		svc[1][0] != "photos<&>" || !strings.Contains(svc[1][3], "still down") || svc[2][1] != "—" {
		t.Errorf("services table %q", svc)
	}
	ses := tables["sessions"]
	if len(ses) != 3 || ses[0][0] != "run" || !strings.Contains(ses[0][4], "killed") || ses[1][0] != "run (resumed)" || ses[1][4] != "ok" || ses[2][4] != "exit code 1" {
		t.Errorf("sessions table %q", ses)
	}
	if att := tables["attempts"]; len(att) != 4 {
		t.Errorf("attempts that did not succeed %q", att)
	}
}

// TestReportUnknownFormat: a format the report does not know is an error
// that names the ones it does.
func TestReportUnknownFormat(t *testing.T) {
	v, _, _ := newView()
	err := v.Report(sampleTimeline(), "png")
	if err == nil || !strings.Contains(err.Error(), "svg") || !strings.Contains(err.Error(), "html") {
		t.Errorf("err = %v", err)
	}
}

// TestTimelineEmptyAndTiny: no data at all, and a run of a few
// milliseconds, draw without a fault.
func TestTimelineEmptyAndTiny(t *testing.T) {
	v, out, _ := newView()
	if err := v.Report(&views.Timeline{Title: "empty", Phases: []string{"A"}}, views.ReportSVG); err != nil {
		t.Fatal(err)
	}
	readSVG(t, out.Bytes())
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	v, out, _ = newView()
	tl := &views.Timeline{Title: "tiny", Phases: []string{"A"},
		Sessions: []views.TimelineSession{{Command: "run", Start: t0, End: t0.Add(3 * time.Millisecond), Ended: "ok"}},
		Bars:     []views.TimelineBar{{Phase: "A", Address: "exec.a", Attempt: 1, Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Millisecond), Outcome: views.OutcomeDone}}}
	if err := v.Report(tl, views.ReportSVG); err != nil {
		t.Fatal(err)
	}
	if doc := readSVG(t, out.Bytes()); len(doc.bars) != 1 {
		t.Errorf("bars %v", doc.bars)
	}
}
