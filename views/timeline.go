package views

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report formats.
const (
	ReportSVG  = "svg"
	ReportHTML = "html"
)

// Timeline is what `migrate report` draws: the sessions (run, rollback)
// the event logs tell of, every attempt of a step in them as a bar in its
// phase's lane, and the services' windows of downtime.
type Timeline struct {
	Title string
	// Phases are the lanes, in run order; a bar of a phase not listed
	// gets a lane after them.
	Phases []string
	// Sessions are in the order they ran.
	Sessions []TimelineSession
	Bars     []TimelineBar
	Services []ServiceStatus
}

// TimelineSession is one writing command.
type TimelineSession struct {
	Command    string // run, rollback
	Start, End time.Time
	// Ended is how it ended, as its log says: "ok", "exit code 1", an
	// error; empty when it was killed.
	Ended string
	// Killed: its log has no end line (SIGKILL, a power cut), End is the
	// last thing it wrote.
	Killed bool
	// Running: its log has no end line yet, and it holds the state's
	// lock: it is still at work (End is the last thing it wrote).
	Running bool
}

// Outcome is how a bar's attempt ended.
type Outcome string

// The outcomes of a bar.
const (
	OutcomeDone    Outcome = "done"
	OutcomeAdopted Outcome = "adopted" // found done after a kill
	OutcomeFailed  Outcome = "failed"
	OutcomeRetried Outcome = "retried" // failed, and tried again
	OutcomeStopped Outcome = "stopped" // a gentle stop ended it, not done
	OutcomeSkipped Outcome = "skipped"
	OutcomeKilled  Outcome = "killed"  // the process was killed during it
	OutcomeRunning Outcome = "running" // still at it, as the report is made
	// OutcomeReverted and OutcomeRevertFailed end a revert.
	OutcomeReverted     Outcome = "reverted"
	OutcomeRevertFailed Outcome = "revert failed"
	// OutcomeUnknown: the log lost how it ended.
	OutcomeUnknown Outcome = "unknown"
)

// TimelineBar is one attempt of a step (or one revert of it).
type TimelineBar struct {
	Phase   string
	Address string
	Check   bool
	Revert  bool
	Attempt int // the try's number; 0 for a revert
	// Start is End when the log has only the attempt's end (a step
	// adopted after a kill): the bar is drawn as a thin mark.
	Start, End time.Time
	Outcome    Outcome
}

// outcomeColors fill the bars; the legend lists them in this order.
var outcomeColors = []struct {
	o    Outcome
	fill string
}{
	{OutcomeDone, "#2e9d4a"},
	{OutcomeAdopted, "#8fd19e"},
	{OutcomeFailed, "#d64541"},
	{OutcomeRetried, "#eea19e"},
	{OutcomeKilled, "#f0932b"},
	{OutcomeRunning, "#3b7dd8"},
	{OutcomeStopped, "#f6c27a"},
	{OutcomeSkipped, "#c8c8c8"},
	{OutcomeReverted, "#8e6cc0"},
	{OutcomeRevertFailed, "#7b1f3a"},
	{OutcomeUnknown, "#8a8a8a"},
}

func outcomeFill(o Outcome) string {
	for _, c := range outcomeColors {
		if c.o == o {
			return c.fill
		}
	}
	return "#8a8a8a"
}

// Report writes t in format: svg, a picture standing alone; html, a page
// with the picture and tables of the services and sessions. Neither needs
// anything else: no script, font or file.
func (v *View) Report(t *Timeline, format string) error {
	bw := bufio.NewWriter(v.out)
	switch format {
	case ReportSVG, "":
		writeTimelineSVG(bw, t)
	case ReportHTML:
		writeTimelineHTML(bw, t)
	default:
		return fmt.Errorf("unknown report format %q: use %s or %s", format, ReportSVG, ReportHTML)
	}
	return bw.Flush()
}

// The timeline's layout, in pixels.
const (
	tlPad      = 16
	tlPlotW    = 960 // the time axis, breaks included
	tlRightW   = 160 // room for labels that pass the axis's end
	tlTitleH   = 44
	tlLabelRow = 16 // a row of session or service labels
	tlRowH     = 18 // a sub-row of a lane
	tlBarH     = 14
	tlLanePad  = 4
	tlAxisH    = 44
	tlLegendH  = 24
	tlCharW    = 6.6 // a character of the 11px monospace font
	tlMinBarW  = 3
	tlBreakW   = 28
	// tlGapMin: a gap between sessions longer than this is drawn as a
	// break of the axis, tlBreakW wide.
	tlGapMin = 5 * time.Minute
	// tlLabelBars: a phase with no more bars than this gets every bar's
	// address written, beside the bar when it does not fit inside.
	tlLabelBars = 60
)

// tlSegment is a stretch of time drawn to scale, from x on.
type tlSegment struct {
	from, to time.Time
	x        float64
}

// tlScale maps times to x: the busy stretches to scale, each long gap
// between them squeezed into a break.
type tlScale struct {
	segs []tlSegment
	pps  float64 // pixels per second
}

func (s tlScale) x(t time.Time) float64 {
	for i, g := range s.segs {
		if t.After(g.to) && i < len(s.segs)-1 {
			continue
		}
		if i > 0 && t.Before(g.from) {
			// In the break before g.
			prev := s.segs[i-1]
			gx := prev.x + prev.to.Sub(prev.from).Seconds()*s.pps
			f := t.Sub(prev.to).Seconds() / g.from.Sub(prev.to).Seconds()
			return gx + min(1, max(0, f))*tlBreakW
		}
		return g.x + max(0, t.Sub(g.from).Seconds())*s.pps
	}
	return 0
}

// newScale covers the busy stretches (from, to pairs, any order) with
// width pixels, starting at x0.
func newScale(spans [][2]time.Time, x0, width float64) tlScale {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	var segs []tlSegment
	for _, sp := range spans {
		if n := len(segs); n > 0 && sp[0].Sub(segs[n-1].to) <= tlGapMin {
			if sp[1].After(segs[n-1].to) {
				segs[n-1].to = sp[1]
			}
			continue
		}
		segs = append(segs, tlSegment{from: sp[0], to: sp[1]})
	}
	if len(segs) == 0 {
		t := time.Unix(0, 0).UTC()
		segs = []tlSegment{{from: t, to: t.Add(time.Second)}}
	}
	var busy time.Duration
	for _, g := range segs {
		busy += g.to.Sub(g.from)
	}
	if busy <= 0 {
		busy = time.Second
		segs[len(segs)-1].to = segs[len(segs)-1].to.Add(time.Second)
	}
	s := tlScale{segs: segs, pps: (width - float64(len(segs)-1)*tlBreakW) / busy.Seconds()}
	x := x0
	for i := range s.segs {
		s.segs[i].x = x
		x += s.segs[i].to.Sub(s.segs[i].from).Seconds()*s.pps + tlBreakW
	}
	return s
}

// tickSteps are the steps the axis may take, the first that leaves
// enough room between labels wins.
var tickSteps = []time.Duration{
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

func (s tlScale) tickStep() time.Duration {
	for _, d := range tickSteps {
		if d.Seconds()*s.pps >= 80 {
			return d
		}
	}
	return tickSteps[len(tickSteps)-1]
}

// tickLabel is t on the axis: milliseconds when the step is below a
// second, seconds when it is below a minute,
// the date too when the timeline spans days.
func tickLabel(t time.Time, step time.Duration, days bool) string {
	layout := "15:04"
	switch {
	case step < time.Second:
		layout = "15:04:05.000"
	case step < time.Minute:
		layout = "15:04:05"
	}
	if days {
		layout = "Jan 2 " + layout
	}
	return t.UTC().Format(layout)
}

// tlBar is a bar placed: its x extent, the room its label takes, and its
// sub-row.
type tlBar struct {
	TimelineBar
	x0, x1 float64
	row    int
	label  string
	inside bool // the label fits in the bar
}

// tlLane is a phase's lane.
type tlLane struct {
	phase string
	bars  []tlBar
	rows  int
	y     float64
}

// tlLayout is where the timeline's parts are drawn.
type tlLayout struct {
	scale       tlScale
	from, to    time.Time // the data's first and last times
	labelW      float64
	plotX       float64
	width       float64
	sessY       float64 // the first row of session labels
	sessRows    int
	sessLabels  []tlLabel
	svcY        float64 // the first row of service labels
	lanes       []tlLane
	lanesY      float64
	lanesBottom float64
	height      float64
}

// tlLabel is a label of a session's mark, placed in a row so that labels
// do not overlap.
type tlLabel struct {
	x    float64
	row  int
	text string
	kill bool
}

// placeLabels gives each label the first of rows rows where it clears the
// one before it; rows grows when none does (up to a bound).
func placeLabels(ls []tlLabel) int {
	var ends []float64
	for i := range ls {
		w := float64(len([]rune(ls[i].text)))*tlCharW + 8
		row := -1
		for r, e := range ends {
			if ls[i].x >= e {
				row = r
				break
			}
		}
		if row < 0 {
			if len(ends) < 4 {
				ends = append(ends, 0)
				row = len(ends) - 1
			} else {
				row = len(ends) - 1
			}
		}
		ls[i].row = row
		ends[row] = ls[i].x + w
	}
	return max(1, len(ends))
}

// span is the earliest and the latest time the timeline knows (the
// latest is where a window still open ends); zero when it knows none.
func (t *Timeline) span() (from, to time.Time) {
	first := true
	see := func(x time.Time) {
		if x.IsZero() {
			return
		}
		if first || x.Before(from) {
			from = x
		}
		if first || x.After(to) {
			to = x
		}
		first = false
	}
	for _, s := range t.Sessions {
		see(s.Start)
		see(s.End)
	}
	for _, b := range t.Bars {
		see(b.Start)
		see(b.End)
	}
	for _, s := range t.Services {
		if s.DownSince != nil {
			see(*s.DownSince)
		}
		if s.ServingSince != nil {
			see(*s.ServingSince)
		}
	}
	return from, to
}

func layoutTimeline(t *Timeline) tlLayout {
	var l tlLayout
	l.from, l.to = t.span()

	// The busy stretches: the sessions, and whatever lies outside them
	// (a window whose start's log was pruned).
	var spans [][2]time.Time
	for _, s := range t.Sessions {
		spans = append(spans, [2]time.Time{s.Start, later(s.Start, s.End)})
	}
	for _, b := range t.Bars {
		spans = append(spans, [2]time.Time{b.Start, later(b.Start, b.End)})
	}
	for _, s := range t.Services {
		for _, p := range []*time.Time{s.DownSince, s.ServingSince} {
			if p != nil {
				spans = append(spans, [2]time.Time{*p, *p})
			}
		}
	}

	// Lanes: the phases in run order, then any other a bar names.
	lanes := map[string]int{}
	addLane := func(p string) {
		if _, ok := lanes[p]; !ok {
			lanes[p] = len(l.lanes)
			l.lanes = append(l.lanes, tlLane{phase: p})
		}
	}
	for _, p := range t.Phases {
		addLane(p)
	}
	for _, b := range t.Bars {
		addLane(b.Phase)
	}
	maxName := 8
	for _, ln := range l.lanes {
		maxName = max(maxName, len([]rune(laneName(ln.phase))))
	}
	l.labelW = min(240, float64(maxName)*7.2+24)
	l.plotX = tlPad + l.labelW
	l.width = l.plotX + tlPlotW + tlRightW
	l.scale = newScale(spans, l.plotX, tlPlotW)

	// Session marks and their labels.
	for i, s := range t.Sessions {
		text := s.Command
		if i > 0 && t.Sessions[i-1].Killed {
			text = "resumed " + s.Command
		}
		if s.Running {
			text += " (running)"
		}
		l.sessLabels = append(l.sessLabels, tlLabel{x: l.scale.x(s.Start), text: text})
		if s.Killed {
			l.sessLabels = append(l.sessLabels, tlLabel{x: l.scale.x(s.End), text: "✕ killed", kill: true})
		}
	}
	sort.SliceStable(l.sessLabels, func(i, j int) bool { return l.sessLabels[i].x < l.sessLabels[j].x })
	l.sessRows = placeLabels(l.sessLabels)
	l.sessY = tlPad + tlTitleH
	l.svcY = l.sessY + float64(l.sessRows)*tlLabelRow + 4
	l.lanesY = l.svcY + float64(len(t.Services))*tlLabelRow + 6

	// Bars in sub-rows: the first row whose last bar (and its label)
	// ends before this one starts.
	for _, b := range t.Bars {
		ln := &l.lanes[lanes[b.Phase]]
		ln.bars = append(ln.bars, tlBar{TimelineBar: b})
	}
	y := l.lanesY
	for i := range l.lanes {
		ln := &l.lanes[i]
		sort.SliceStable(ln.bars, func(a, b int) bool {
			if !ln.bars[a].Start.Equal(ln.bars[b].Start) {
				return ln.bars[a].Start.Before(ln.bars[b].Start)
			}
			return ln.bars[a].End.Before(ln.bars[b].End)
		})
		labelled := len(ln.bars) <= tlLabelBars
		var ends []float64
		for j := range ln.bars {
			b := &ln.bars[j]
			b.x0 = l.scale.x(b.Start)
			b.x1 = max(l.scale.x(b.End), b.x0+tlMinBarW)
			b.label = barLabel(b.TimelineBar)
			reach := b.x1
			if labelled {
				w := float64(len([]rune(b.label)))*tlCharW + 6
				b.inside = b.x1-b.x0 >= w
				if !b.inside {
					reach = b.x1 + w
				}
			}
			b.row = -1
			for r, e := range ends {
				if b.x0 >= e+1 {
					b.row = r
					break
				}
			}
			if b.row < 0 {
				ends = append(ends, 0)
				b.row = len(ends) - 1
			}
			ends[b.row] = reach
			if !labelled {
				b.label = ""
			}
		}
		ln.rows = max(1, len(ends))
		ln.y = y
		y += float64(ln.rows)*tlRowH + 2*tlLanePad
	}
	l.lanesBottom = y
	l.height = y + tlAxisH + tlLegendH + tlPad
	return l
}

func laneName(phase string) string {
	if phase == "" {
		return "(no phase)"
	}
	return phase
}

// barLabel is what a bar says: its address, and which try or a revert.
func barLabel(b TimelineBar) string {
	s := b.Address
	switch {
	case b.Revert:
		s = "revert " + s
	case b.Attempt > 1:
		s += fmt.Sprintf(" #%d", b.Attempt)
	}
	return s
}

// windowEnd is where a service's window ends: its serving time, or the
// end of the data while it is still down.
func windowEnd(s ServiceStatus, to time.Time) time.Time {
	if s.ServingSince != nil {
		return *s.ServingSince
	}
	return later(to, *s.DownSince)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// downtime is a service's downtime (so far, while it is still down) and
// whether it passed its max_downtime.
func downtime(s ServiceStatus, to time.Time) (d time.Duration, still, over bool) {
	if s.DownSince == nil {
		return 0, false, false
	}
	d = windowEnd(s, to).Sub(*s.DownSince)
	if s.Downtime != nil {
		d = time.Duration(*s.Downtime)
	}
	return d, s.ServingSince == nil, s.MaxDowntime > 0 && d > time.Duration(s.MaxDowntime)
}

// downtimeText says a service's downtime for its window's label.
func downtimeText(s ServiceStatus, to time.Time) (text string, over bool) {
	d, still, over := downtime(s, to)
	text = "down " + fmtDuration(d)
	if still {
		text += " so far, still down"
	}
	if s.MaxDowntime > 0 {
		text += ", max " + time.Duration(s.MaxDowntime).String()
		if over {
			text += ": OVER"
		}
	}
	return text, over
}

func writeTimelineSVG(w io.Writer, t *Timeline) {
	l := layoutTimeline(t)
	W, H := int(math.Ceil(l.width)), int(math.Ceil(l.height))
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="monospace" font-size="11">`+"\n", W, H, W, H)
	fmt.Fprintf(w, `  <rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(w, `  <text x="%d" y="%d" font-size="16" font-weight="bold">%s</text>`+"\n", tlPad, tlPad+16, svgEsc(t.Title))
	sub := "nothing has run yet"
	if !l.from.IsZero() {
		sub = fmt.Sprintf("%d sessions, %s to %s UTC", len(t.Sessions), l.from.UTC().Format("2006-01-02 15:04:05"), l.to.UTC().Format("2006-01-02 15:04:05"))
	}
	fmt.Fprintf(w, `  <text x="%d" y="%d" fill="#555">%s</text>`+"\n", tlPad, tlPad+34, svgEsc(sub))

	plotEnd := l.plotX + tlPlotW
	// Lanes: a band each, its phase's name at the left.
	for i, ln := range l.lanes {
		h := float64(ln.rows)*tlRowH + 2*tlLanePad
		fill := "#f7f8fb"
		if i%2 == 1 {
			fill = "#eef1f6"
		}
		fmt.Fprintf(w, `  <g class="lane" data-phase="%s"><rect x="%d" y="%s" width="%s" height="%s" fill="%s"/><text x="%d" y="%s" font-size="12" font-weight="bold">%s</text></g>`+"\n",
			svgEsc(ln.phase), tlPad, px(ln.y), px(plotEnd-tlPad+4), px(h), fill, tlPad+4, px(ln.y+tlLanePad+tlBarH-2), svgEsc(laneName(ln.phase)))
	}

	// The axis's ticks, as grid lines across the lanes, and its breaks.
	step := l.scale.tickStep()
	days := l.from.UTC().YearDay() != l.to.UTC().YearDay() || l.to.Sub(l.from) >= 24*time.Hour
	axisY := l.lanesBottom + 4
	fmt.Fprintf(w, `  <g class="axis"><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333"/>`+"\n", px(l.plotX), px(axisY), px(plotEnd), px(axisY))
	lastLabel := math.Inf(-1)
	for i, g := range l.scale.segs {
		ticks := []time.Time{}
		for tk := g.from.Truncate(step); !tk.After(g.to); tk = tk.Add(step) {
			if !tk.Before(g.from) {
				ticks = append(ticks, tk)
			}
		}
		if i > 0 || len(ticks) == 0 {
			// A stretch after a break, or one too short for a tick, says
			// where it starts.
			ticks = append([]time.Time{g.from}, ticks...)
		}
		for _, tk := range ticks {
			x := l.scale.x(tk)
			fmt.Fprintf(w, `    <line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dde1e8"/><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333"/>`+"\n",
				px(x), px(l.lanesY), px(x), px(l.lanesBottom), px(x), px(axisY), px(x), px(axisY+5))
			label := tickLabel(tk, step, days)
			if tk.Equal(g.from) && !tk.Equal(g.from.Truncate(step)) {
				label = tickLabel(tk, min(step, time.Second), days)
			}
			half := float64(len(label)) * tlCharW / 2
			if x-half < lastLabel+6 {
				continue
			}
			lastLabel = x + half
			fmt.Fprintf(w, `    <text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", px(x), px(axisY+17), svgEsc(label))
		}
	}
	fmt.Fprintf(w, `    <text x="%d" y="%s" fill="#555">UTC</text></g>`+"\n", tlPad+4, px(axisY+17))
	for i := 1; i < len(l.scale.segs); i++ {
		prev, g := l.scale.segs[i-1], l.scale.segs[i]
		x0 := l.scale.x(prev.to)
		fmt.Fprintf(w, `  <g class="break" data-gap="%s"><title>%s</title><rect x="%s" y="%s" width="%d" height="%s" fill="white" opacity="0.85"/>`,
			svgEsc(g.from.Sub(prev.to).Round(time.Second).String()), svgEsc(fmt.Sprintf("%s of nothing running, not to scale", fmtDuration(g.from.Sub(prev.to)))),
			px(x0), px(l.lanesY), tlBreakW, px(l.lanesBottom-l.lanesY))
		for _, dx := range []float64{8, 16} {
			fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333" stroke-width="1.5"/>`, px(x0+dx-3), px(axisY+6), px(x0+dx+3), px(axisY-6))
		}
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" fill="#555" font-size="10">+%s</text></g>`+"\n", px(x0+tlBreakW/2), px(axisY+30), svgEsc(shortDuration(g.from.Sub(prev.to))))
	}

	// Services' windows, across every lane, their labels above.
	for i, s := range t.Services {
		if s.DownSince == nil {
			continue
		}
		x0, x1 := l.scale.x(*s.DownSince), l.scale.x(windowEnd(s, l.to))
		x1 = max(x1, x0+2)
		text, over := downtimeText(s, l.to)
		ly := l.svcY + float64(i)*tlLabelRow
		color, weight := "#8a6d00", "normal"
		if over {
			color, weight = "#c0392b", "bold"
		}
		label := s.Name + ": " + text
		anchor, tx := "start", x0+3
		if tx+float64(len([]rune(label)))*tlCharW > l.width-tlPad {
			anchor, tx = "end", x1-3
		}
		fmt.Fprintf(w, `  <g class="window" data-service="%s" data-over="%t"><title>%s</title><rect x="%s" y="%s" width="%s" height="%s" fill="#ffd23f" fill-opacity="0.22" stroke="%s" stroke-dasharray="4 3"/><text x="%s" y="%s" text-anchor="%s" fill="%s" font-weight="%s">%s</text></g>`+"\n",
			svgEsc(s.Name), over, svgEsc("service "+s.Name+": "+text),
			px(x0), px(ly), px(x1-x0), px(l.lanesBottom-ly), color,
			px(tx), px(ly+12), anchor, color, weight, svgEsc(label))
	}

	// Bars.
	for _, ln := range l.lanes {
		for _, b := range ln.bars {
			y := ln.y + tlLanePad + float64(b.row)*tlRowH
			rx := 2
			if b.Check {
				rx = tlBarH / 2
			}
			stroke := ""
			if b.Outcome == OutcomeKilled {
				stroke = ` stroke="#8a3b00" stroke-width="1.5" stroke-dasharray="3 2"`
			}
			title := fmt.Sprintf("%s (phase %s): %s, %s to %s UTC, %s", barLabel(b.TimelineBar), laneName(b.Phase), b.Outcome,
				b.Start.UTC().Format("15:04:05.000"), b.End.UTC().Format("15:04:05.000"), fmtDuration(b.End.Sub(b.Start)))
			if b.Check {
				title = "check " + title
			}
			fmt.Fprintf(w, `  <g class="bar" data-phase="%s" data-address="%s" data-outcome="%s" data-revert="%t" data-check="%t" data-row="%d"><title>%s</title><rect x="%s" y="%s" width="%s" height="%d" rx="%d" fill="%s"%s/>`,
				svgEsc(b.Phase), svgEsc(b.Address), svgEsc(string(b.Outcome)), b.Revert, b.Check, b.row, svgEsc(title),
				px(b.x0), px(y), px(b.x1-b.x0), tlBarH, rx, outcomeFill(b.Outcome), stroke)
			switch {
			case b.label == "":
			case b.inside:
				fmt.Fprintf(w, `<text x="%s" y="%s" fill="white">%s</text>`, px(b.x0+3), px(y+tlBarH-3), svgEsc(b.label))
			default:
				fmt.Fprintf(w, `<text x="%s" y="%s" fill="#222">%s</text>`, px(b.x1+3), px(y+tlBarH-3), svgEsc(b.label))
			}
			fmt.Fprintln(w, "</g>")
		}
	}

	// Sessions: a line where each starts; a kill, where it ended.
	for i, s := range t.Sessions {
		x := l.scale.x(s.Start)
		ended := s.Ended
		switch {
		case s.Killed:
			ended = "killed"
		case s.Running:
			ended = "still running"
		}
		fmt.Fprintf(w, `  <g class="session" data-command="%s" data-killed="%t" data-resumed="%t"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#1f2d4d" stroke-width="1.2"/></g>`+"\n",
			svgEsc(s.Command), s.Killed, i > 0 && t.Sessions[i-1].Killed,
			svgEsc(fmt.Sprintf("%s from %s to %s UTC: %s", s.Command, s.Start.UTC().Format("15:04:05"), s.End.UTC().Format("15:04:05"), ended)),
			px(x), px(l.sessY+2), px(x), px(l.lanesBottom))
		if s.Killed {
			xk := l.scale.x(s.End)
			fmt.Fprintf(w, `  <g class="kill"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#c0392b" stroke-width="2" stroke-dasharray="5 3"/></g>`+"\n",
				svgEsc(s.Command+" killed: "+killText(t.Sessions, i)),
				px(xk), px(l.sessY+2), px(xk), px(l.lanesBottom))
		}
	}
	for _, lb := range l.sessLabels {
		color := "#1f2d4d"
		if lb.kill {
			color = "#c0392b"
		}
		fmt.Fprintf(w, `  <text class="session-label" x="%s" y="%s" fill="%s" font-weight="bold">%s</text>`+"\n",
			px(lb.x+3), px(l.sessY+float64(lb.row)*tlLabelRow+12), color, svgEsc(lb.text))
	}

	// The legend.
	ly := l.lanesBottom + tlAxisH
	x := float64(tlPad)
	fmt.Fprintf(w, `  <g class="legend">`)
	for _, c := range outcomeColors {
		fmt.Fprintf(w, `<rect x="%s" y="%s" width="12" height="10" rx="2" fill="%s"/><text x="%s" y="%s">%s</text>`, px(x), px(ly), c.fill, px(x+16), px(ly+9), svgEsc(string(c.o)))
		x += 16 + float64(len(c.o))*tlCharW + 14
	}
	fmt.Fprintf(w, `<rect x="%s" y="%s" width="24" height="10" rx="5" fill="#888"/><text x="%s" y="%s">check</text>`, px(x), px(ly), px(x+28), px(ly+9))
	fmt.Fprintln(w, "</g>")
	fmt.Fprintln(w, "</svg>")
}

// killText says what is known of session i's kill: its log's last time,
// and the next session's start, before which it died.
func killText(ss []TimelineSession, i int) string {
	s := ss[i]
	text := fmt.Sprintf("its log ends at %s UTC without an end line", s.End.UTC().Format("15:04:05.000"))
	if i+1 < len(ss) {
		text += fmt.Sprintf("; it died before %s UTC, when the next %s started", ss[i+1].Start.UTC().Format("15:04:05"), ss[i+1].Command)
	}
	return text
}

// px writes a coordinate with at most one decimal.
func px(f float64) string {
	s := fmt.Sprintf("%.1f", f)
	return strings.TrimSuffix(s, ".0")
}

// shortDuration is a gap's length in the largest units: 2h13m, 7m.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	case d >= time.Minute:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	}
	return d.Round(time.Second).String()
}

// htmlTime is a time in the tables.
func htmlTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func writeTimelineHTML(w io.Writer, t *Timeline) {
	_, to := t.span()
	fmt.Fprintf(w, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>%s</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #1d2330; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #c9cfdb; padding: 0.25em 0.7em; text-align: left; }
th { background: #eef1f6; }
td.over, span.over { color: #c0392b; font-weight: bold; }
td.killed { color: #c0392b; font-weight: bold; }
.timeline { overflow-x: auto; }
code { font-size: 0.95em; }
</style>
</head>
<body>
<h1>%s</h1>
<div class="timeline">
`, svgEsc(t.Title), svgEsc(t.Title))
	writeTimelineSVG(w, t)
	fmt.Fprintln(w, "</div>")

	fmt.Fprintln(w, "<h2>Services</h2>")
	if len(t.Services) == 0 {
		fmt.Fprintln(w, "<p>The runbook declares no service.</p>")
	} else {
		fmt.Fprintln(w, `<table class="services">
<thead><tr><th>Service</th><th>Down since</th><th>Serving since</th><th>Downtime</th><th>Max downtime</th></tr></thead>
<tbody>`)
		for _, s := range t.Services {
			d, still, over := downtime(s, to)
			down := "—"
			if s.DownSince != nil {
				down = fmtDuration(d)
			}
			if still {
				down += " so far (still down)"
			}
			maxd := "—"
			if s.MaxDowntime > 0 {
				maxd = time.Duration(s.MaxDowntime).String()
			}
			class := ""
			if over {
				class = ` class="over"`
				down += " (over the max)"
			}
			fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%s</td><td%s>%s</td><td>%s</td></tr>\n",
				svgEsc(s.Name), htmlTime(s.DownSince), htmlTime(s.ServingSince), class, svgEsc(down), svgEsc(maxd))
		}
		fmt.Fprintln(w, "</tbody>\n</table>")
	}

	fmt.Fprintln(w, "<h2>Sessions</h2>")
	if len(t.Sessions) == 0 {
		fmt.Fprintln(w, "<p>Nothing has run yet.</p>")
	} else {
		fmt.Fprintln(w, `<table class="sessions">
<thead><tr><th>Command</th><th>Start</th><th>End</th><th>Took</th><th>Ended</th></tr></thead>
<tbody>`)
		for i, s := range t.Sessions {
			cmd := s.Command
			if i > 0 && t.Sessions[i-1].Killed {
				cmd += " (resumed)"
			}
			ended, class := s.Ended, ""
			switch {
			case s.Killed:
				ended, class = "killed: "+killText(t.Sessions, i), ` class="killed"`
			case s.Running:
				ended = "still running"
			}
			fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td%s>%s</td></tr>\n",
				svgEsc(cmd), htmlTime(&s.Start), htmlTime(&s.End), svgEsc(fmtDuration(s.End.Sub(s.Start))), class, svgEsc(ended))
		}
		fmt.Fprintln(w, "</tbody>\n</table>")
	}

	// The attempts that did not end done, for reading without hovering.
	var bad []TimelineBar
	for _, b := range t.Bars {
		if !slices.Contains([]Outcome{OutcomeDone, OutcomeAdopted, OutcomeReverted, OutcomeSkipped}, b.Outcome) {
			bad = append(bad, b)
		}
	}
	if len(bad) > 0 {
		fmt.Fprintln(w, `<h2>Attempts that did not succeed</h2>
<table class="attempts">
<thead><tr><th>Phase</th><th>Step</th><th>Start</th><th>Took</th><th>Outcome</th></tr></thead>
<tbody>`)
		for _, b := range bad {
			fmt.Fprintf(w, "<tr><td>%s</td><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				svgEsc(laneName(b.Phase)), svgEsc(barLabel(b)), htmlTime(&b.Start), svgEsc(fmtDuration(b.End.Sub(b.Start))), svgEsc(string(b.Outcome)))
		}
		fmt.Fprintln(w, "</tbody>\n</table>")
	}
	fmt.Fprintln(w, "</body>\n</html>")
}
