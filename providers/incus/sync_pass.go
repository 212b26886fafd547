package incus

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The passes of incus_sync (sync.go): the trees are listed, hashed and
// copied inside the instance by sync.sh; what to copy, what to hash and
// whether the copy is verified is decided here, from its answers, which
// are never trusted (a VM's guest makes them): bounded, parsed without
// panics, every name checked before it is written into a work file.

//go:embed sync.sh
var syncScript string

// Suffixes of the files kept beside the destination (never inside it:
// the destination becomes the application's directory).
const (
	manifestSuffix = ".manifest"
	workSuffix     = ".work"
	tmpSuffix      = ".migrate-tmp"
)

// Bounds of what the instance answers.
const (
	maxSyncOutput   = 512 << 20 // bytes of one command's records
	maxSyncEntries  = 2_000_000 // entries of a tree
	maxManifestSize = 512 << 20
)

// guest runs the helper in the instance and reads and writes the files
// beside the destination: the Incus exec and files APIs (sync.go), or
// this machine in the unit tests.
type guest interface {
	// run runs argv; its stdout goes to out. A non-zero exit is an error
	// that says what the command wrote to stderr.
	run(ctx context.Context, argv []string, out io.Writer) error
	// read reads a file; ok false when it does not exist.
	read(ctx context.Context, p string, max int64) (b []byte, ok bool, err error)
	write(ctx context.Context, p string, b []byte) error
}

func helper(args ...string) []string {
	return append([]string{"sh", "-c", syncScript, syncScript}, args...)
}

// boundedBuf is a command's stdout, up to a size.
type boundedBuf struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *boundedBuf) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return len(p), nil // dropped: the command is not cut short, its answer refused
	}
	return b.Buffer.Write(p)
}

func runHelper(ctx context.Context, g guest, args ...string) ([]string, error) {
	out := &boundedBuf{max: maxSyncOutput}
	if err := g.run(ctx, helper(args...), out); err != nil {
		// What it said before it failed (an E record names the file).
		return strings.Split(strings.TrimSuffix(out.String(), "\x00"), "\x00"), err
	}
	if out.over {
		return nil, fmt.Errorf("the instance answered more than %d MiB to %s: refused", maxSyncOutput>>20, args[0])
	}
	b := out.Bytes()
	if len(b) == 0 {
		return nil, nil
	}
	if b[len(b)-1] != 0 {
		return nil, fmt.Errorf("the instance's answer to %s ends without its terminator: cut short", args[0])
	}
	return strings.Split(string(b[:len(b)-1]), "\x00"), nil
}

// meta is a stat line: "%f %s %Y %u %g" (raw mode in hex, size, mtime,
// uid, gid).
type meta struct {
	mode        uint32
	size, mtime int64
	uid, gid    int64
}

const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

// kind is 'f' (a regular file), 'd', 'l' (a symlink) or 'o' (anything
// else: not copied).
func (m meta) kind() byte {
	switch m.mode & sIFMT {
	case sIFREG:
		return 'f'
	case sIFDIR:
		return 'd'
	case sIFLNK:
		return 'l'
	}
	return 'o'
}

func parseMeta(s string) (meta, bool) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return meta{}, false
	}
	mode, err1 := strconv.ParseUint(f[0], 16, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	uid, err4 := strconv.ParseInt(f[3], 10, 64)
	gid, err5 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || size < 0 || uid < 0 || gid < 0 {
		return meta{}, false
	}
	return meta{uint32(mode), size, mtime, uid, gid}, true
}

// node is an entry of a listed tree.
type node struct {
	meta
	target string // a symlink's
}

// tree is a listed tree by relative path ("" is its root).
type ltree map[string]*node

// listing is the answer of the helper's list command.
type listing struct {
	now        int64
	trees      []ltree // nil: the root is missing
	notDir     []bool
	incomplete []bool // find reported errors
}

// relOf turns a name find printed ("." or "./a/b") into a relative path,
// refusing any that is not one under the root.
func relOf(name string) (string, error) {
	if name == "." {
		return "", nil
	}
	rel, ok := strings.CutPrefix(name, "./")
	if !ok || rel == "" {
		return "", fmt.Errorf("the name %s", strconv.Quote(name))
	}
	for _, el := range strings.Split(rel, "/") {
		if err := guestName(el); err != nil {
			return "", err
		}
	}
	return rel, nil
}

// parseListing reads the records of list (sync.sh).
func parseListing(recs []string, roots int) (*listing, error) {
	l := &listing{trees: make([]ltree, roots), notDir: make([]bool, roots), incomplete: make([]bool, roots), now: -1}
	bad := func(format string, args ...any) (*listing, error) {
		return nil, fmt.Errorf("the instance's listing cannot be read: "+format, args...)
	}
	cur, entries, done := -1, 0, false
	for i := 0; i < len(recs); {
		r := recs[i]
		i++
		if done {
			return bad("records after its end")
		}
		var arg string
		r, arg, _ = strings.Cut(r, " ")
		switch r {
		case "T":
			n, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				return bad("the time %s", strconv.Quote(arg))
			}
			l.now = n
		case "R":
			n, err := strconv.Atoi(arg)
			if err != nil || n != cur+1 || n >= roots {
				return bad("the root %s", strconv.Quote(arg))
			}
			cur = n
			l.trees[cur] = ltree{}
		case "M", "F", "W":
			if cur < 0 {
				return bad("a record before its root")
			}
			switch r {
			case "M":
				l.trees[cur] = nil
			case "F":
				l.trees[cur], l.notDir[cur] = nil, true
			default:
				l.incomplete[cur] = true
			}
		case "N":
			k, err := strconv.Atoi(arg)
			if err != nil || k < 1 || k > maxSyncEntries || cur < 0 || l.trees[cur] == nil || i+k >= len(recs) {
				return bad("a batch of %s names", strconv.Quote(arg))
			}
			names, lines := recs[i:i+k], strings.Split(recs[i+k], "\n")
			i += k + 1
			if len(lines) != k {
				return bad("%d stat lines for %d names", len(lines), k)
			}
			if entries += k; entries > maxSyncEntries {
				return bad("more than %d entries", maxSyncEntries)
			}
			for j, name := range names {
				rel, err := relOf(name)
				if err != nil {
					return bad("%v", err)
				}
				m, ok := parseMeta(lines[j])
				if !ok {
					return bad("the stat line %s", strconv.Quote(lines[j]))
				}
				if old := l.trees[cur][rel]; old != nil {
					return bad("the name %s twice", strconv.Quote(rel))
				}
				l.trees[cur][rel] = &node{meta: m}
			}
		case "L":
			if i+1 >= len(recs) || cur < 0 || l.trees[cur] == nil {
				return bad("a link record cut short")
			}
			rel, err := relOf(recs[i])
			if err != nil {
				return bad("%v", err)
			}
			if n := l.trees[cur][rel]; n != nil && n.kind() == 'l' {
				n.target = recs[i+1]
			}
			i += 2
		case "Z":
			done = true
		default:
			return bad("the record %s", strconv.Quote(r))
		}
	}
	if !done || cur != roots-1 {
		return bad("it was cut short")
	}
	return l, nil
}

func list(ctx context.Context, g guest, stamp string, roots ...string) (*listing, error) {
	recs, err := runHelper(ctx, g, append([]string{"list", stamp}, roots...)...)
	if err != nil {
		return nil, err
	}
	return parseListing(recs, len(roots))
}

// isTmp: rel is a temporary copy a pass left (.NAME.migrate-tmp).
func isTmp(rel string) bool {
	b := path.Base(rel)
	return strings.HasPrefix(b, ".") && strings.HasSuffix(b, tmpSuffix) && len(b) > len(tmpSuffix)+1
}

// sideSum is a file as hashed: its size and mtime then, and its SHA-256.
type sideSum struct {
	size, mtime int64
	sum         string // "-": not known
}

func (s sideSum) matches(n *node) bool {
	return n != nil && n.kind() == 'f' && s.sum != "-" && s.sum != "" && s.size == n.size && s.mtime == n.mtime
}

// mentry is an entry of the manifest: the destination's as the pass left
// it, and for a file the source's as it was hashed.
type mentry struct {
	kind   byte // 'f', 'd', 'l'; 'x': being changed by a pass, not known
	dst    sideSum
	src    sideSum // size -1: no source
	target string
}

// manifest is the file beside the destination.
type manifest struct {
	source  string
	origin  string // "warm" or "final": the pass that first wrote it
	entries map[string]*mentry
}

const manifestMagic = "migrate-sync 1"

func (m *manifest) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nsource %s\norigin %s\n", manifestMagic, strconv.Quote(m.source), m.origin)
	for _, rel := range slices.Sorted(maps.Keys(m.entries)) {
		e := m.entries[rel]
		switch e.kind {
		case 'f':
			fmt.Fprintf(&b, "f %s %d %d %s %d %d %s\n", strconv.Quote(rel), e.dst.size, e.dst.mtime, orDash(e.dst.sum), e.src.size, e.src.mtime, orDash(e.src.sum))
		case 'l':
			fmt.Fprintf(&b, "l %s %s\n", strconv.Quote(rel), strconv.Quote(e.target))
		default:
			fmt.Fprintf(&b, "%c %s\n", e.kind, strconv.Quote(rel))
		}
	}
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quotedField cuts a Go-quoted string off the front of s.
func quotedField(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	v, err := strconv.Unquote(q)
	return v, strings.TrimPrefix(s[len(q):], " "), err
}

func parseManifest(b []byte) (*manifest, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 3 || lines[0] != manifestMagic {
		return nil, errors.New("not a manifest of incus_sync")
	}
	m := &manifest{entries: map[string]*mentry{}}
	var err error
	src, ok := strings.CutPrefix(lines[1], "source ")
	if !ok {
		return nil, errors.New("no source line")
	}
	if m.source, _, err = quotedField(src); err != nil {
		return nil, fmt.Errorf("source line: %w", err)
	}
	if m.origin, ok = strings.CutPrefix(lines[2], "origin "); !ok || m.origin != "warm" && m.origin != "final" {
		return nil, errors.New("no origin line")
	}
	for n, line := range lines[3:] {
		bad := fmt.Errorf("line %d", n+4)
		if len(line) < 3 || line[1] != ' ' {
			return nil, bad
		}
		rel, rest, err := quotedField(line[2:])
		if err != nil {
			return nil, bad
		}
		e := &mentry{kind: line[0], src: sideSum{size: -1}}
		switch e.kind {
		case 'f':
			f := strings.Fields(rest)
			if len(f) != 6 {
				return nil, bad
			}
			var errs [4]error
			e.dst.size, errs[0] = strconv.ParseInt(f[0], 10, 64)
			e.dst.mtime, errs[1] = strconv.ParseInt(f[1], 10, 64)
			e.src.size, errs[2] = strconv.ParseInt(f[3], 10, 64)
			e.src.mtime, errs[3] = strconv.ParseInt(f[4], 10, 64)
			if errors.Join(errs[:]...) != nil {
				return nil, bad
			}
			e.dst.sum, e.src.sum = f[2], f[5]
		case 'l':
			if e.target, _, err = quotedField(rest); err != nil {
				return nil, bad
			}
		case 'd', 'x':
		default:
			return nil, bad
		}
		m.entries[rel] = e
	}
	return m, nil
}

// critical reports whether rel matches one of the globs: one without a
// slash is matched against the file's name at any depth, one with a
// slash against the whole relative path.
func critical(globs []string, rel string) bool {
	for _, g := range globs {
		target := rel
		if !strings.Contains(g, "/") {
			target = path.Base(rel)
		}
		if ok, _ := path.Match(g, target); ok {
			return true
		}
	}
	return false
}

// shQuote quotes any byte string (but NUL) for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// syncParams is what a pass needs.
type syncParams struct {
	src, dst string
	// state is the directory of the manifest and work files;
	// "": syncStateDir.
	state    string
	final    bool
	critical []string
	logf     func(format string, args ...any)
	// intend is called with the pass's origin decision before it changes
	// anything: cold is a final pass with no warm pass's manifest.
	intend func(cold bool) error
}

// syncResult is a pass's outcome.
type syncResult struct {
	files, bytes             int64
	copiedFiles, copiedBytes int64
	manifest                 string
	cold                     bool
}

// diffError is a verification (or destination) difference: the files.
type diffError struct {
	what  string
	lines []string
	total int
}

func (e *diffError) Error() string { return e.what + ": " + strings.Join(e.lines, "; ") }

// maxNamed is how many files a difference names before a count.
const maxNamed = 20

// names collects the files of a difference by what is wrong with them.
type names struct {
	by    map[string][]string
	total int
}

func (n *names) add(why, rel string) {
	if n.by == nil {
		n.by = map[string][]string{}
	}
	n.by[why] = append(n.by[why], rel)
	n.total++
}

func (n *names) err(what string) error {
	if n.total == 0 {
		return nil
	}
	e := &diffError{what: what, total: n.total}
	shown := 0
	for _, why := range slices.Sorted(maps.Keys(n.by)) {
		list := n.by[why]
		slices.Sort(list)
		var q []string
		for _, rel := range list {
			if shown == maxNamed {
				break
			}
			q = append(q, strconv.Quote(rel))
			shown++
		}
		if len(q) > 0 {
			e.lines = append(e.lines, why+": "+strings.Join(q, ", "))
		}
	}
	if n.total > shown {
		e.lines = append(e.lines, fmt.Sprintf("and %d more", n.total-shown))
	}
	return e
}

// known is what a pass knows of the files' content: a side's SHA-256 at
// a size and mtime.
type known struct{ src, dst map[string]sideSum }

func (k known) srcOf(rel string, n *node) (string, bool) {
	s, ok := k.src[rel]
	if ok && s.matches(n) {
		return s.sum, true
	}
	return "", false
}

func (k known) dstOf(rel string, n *node) (string, bool) {
	s, ok := k.dst[rel]
	if ok && s.matches(n) {
		return s.sum, true
	}
	return "", false
}

// work is the operations of one run of the helper.
type work struct {
	b   strings.Builder
	ops map[string]bool
	n   int
}

func (w *work) add(op, rel string, args ...string) {
	if w.ops == nil {
		w.ops = map[string]bool{}
	}
	w.ops[rel] = true
	w.n++
	w.b.WriteString(op + " " + shQuote(rel))
	for _, a := range args {
		w.b.WriteString(" " + a)
	}
	w.b.WriteByte('\n')
}

// outcome is what the helper's run said, file by file.
type outcome struct {
	copied   map[string]bool
	vanished map[string]bool
}

// runWork writes the work file beside the destination and runs it; the
// hashes and copies it reports go into k.
func runWork(ctx context.Context, g guest, p syncParams, w *work, k known) (outcome, error) {
	o := outcome{copied: map[string]bool{}, vanished: map[string]bool{}}
	if w.n == 0 {
		return o, nil
	}
	wf := p.workPath()
	if err := g.write(ctx, wf, []byte(w.b.String())); err != nil {
		return o, fmt.Errorf("writing %s: %w", wf, err)
	}
	recs, err := runHelper(ctx, g, "run", wf, p.src, p.dst)
	if err != nil {
		if e := failedOn(recs); e != "" {
			err = fmt.Errorf("on %s: %w", e, err)
		}
		return o, err
	}
	bad := func(format string, args ...any) (outcome, error) {
		return o, fmt.Errorf("the instance's answer cannot be read: "+format, args...)
	}
	done := false
	for i := 0; i < len(recs); {
		r := recs[i]
		i++
		switch r {
		case "C", "H":
			if i+5 > len(recs) {
				return bad("a record cut short")
			}
			f := recs[i : i+5]
			i += 5
			rel := f[0]
			if !w.ops[rel] {
				return bad("a record of %s, which it was not asked about", strconv.Quote(rel))
			}
			hs, hd := f[1], f[2]
			ss, sok := parseMeta(f[3])
			ds, dok := parseMeta(f[4])
			if !validSum(hs) || !validSum(hd) {
				return bad("the sha256 of %s", strconv.Quote(rel))
			}
			if r == "C" {
				o.copied[rel] = true
			}
			if sok && ss.kind() == 'f' {
				k.src[rel] = sideSum{ss.size, ss.mtime, hs}
			} else {
				delete(k.src, rel)
			}
			if dok && ds.kind() == 'f' {
				k.dst[rel] = sideSum{ds.size, ds.mtime, hd}
			} else {
				delete(k.dst, rel)
			}
		case "V":
			if i >= len(recs) {
				return bad("a record cut short")
			}
			o.vanished[recs[i]] = true
			i++
		case "Z":
			done = true
		default:
			return bad("the record %s", strconv.Quote(r))
		}
	}
	if !done {
		return bad("it was cut short")
	}
	return o, nil
}

// failedOn is the name an E record of a failed run gives, quoted.
func failedOn(recs []string) string {
	for i, r := range recs {
		if r == "E" && i+1 < len(recs) {
			return strconv.Quote(recs[i+1])
		}
	}
	return ""
}

func validSum(s string) bool {
	if s == "-" {
		return true
	}
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// readManifest reads the manifest beside the destination: nil when there
// is none or it is of another source (said in the log).
func readManifest(ctx context.Context, g guest, p syncParams) (*manifest, error) {
	mf := p.manifestPath()
	b, ok, err := g.read(ctx, mf, maxManifestSize)
	if err != nil || !ok {
		return nil, err
	}
	m, err := parseManifest(b)
	if err != nil {
		p.logf("the manifest %s cannot be read (%v): the pass hashes both sides again", mf, err)
		return nil, nil
	}
	if m.source != p.src {
		p.logf("the manifest %s is of another source (%s): the pass hashes both sides again", mf, strconv.Quote(m.source))
		return nil, nil
	}
	return m, nil
}

// syncPass runs one pass: the warm pass (p.final false) or the final
// one.
func syncPass(ctx context.Context, g guest, p syncParams) (*syncResult, error) {
	if _, err := runHelper(ctx, g, "prep", p.dst, p.stateDir()); err != nil {
		return nil, fmt.Errorf("making %s: %w", p.dst, err)
	}
	l, err := list(ctx, g, p.workPath(), p.src, p.dst)
	if err != nil {
		return nil, err
	}
	S, D := l.trees[0], l.trees[1]
	switch {
	case S == nil && l.notDir[0]:
		return nil, fmt.Errorf("the source %s is not a directory", p.src)
	case S == nil:
		return nil, fmt.Errorf("the source %s does not exist", p.src)
	case D == nil:
		return nil, fmt.Errorf("the destination %s is not a directory", p.dst)
	case l.now < 0:
		return nil, errors.New("the instance's listing has no time")
	case p.final && (l.incomplete[0] || l.incomplete[1]):
		return nil, errors.New("find could not list every file of the two trees (see the log)")
	}
	m, err := readManifest(ctx, g, p)
	if err != nil {
		return nil, err
	}
	res := &syncResult{cold: m == nil || m.origin == "final" && p.final}
	if p.final && m != nil {
		if err := tampered(m, D).err("the destination changed since the last pass (something else writes to it?)"); err != nil {
			return nil, err
		}
	}
	if err := p.intend(res.cold); err != nil {
		return nil, err
	}
	k := known{src: map[string]sideSum{}, dst: map[string]sideSum{}}
	if m != nil {
		for rel, e := range m.entries {
			if e.kind != 'f' || critical(p.critical, rel) {
				continue
			}
			if s, d := S[rel], D[rel]; e.src.matches(s) && e.dst.matches(d) {
				k.src[rel], k.dst[rel] = e.src, e.dst
			}
		}
	}
	var rm, mk, cp work
	for _, rel := range slices.Sorted(maps.Keys(D)) {
		if s := S[rel]; s == nil && (isTmp(rel) || p.final) && !removedWith(rm.ops, rel) {
			rm.add("X", rel)
		}
	}
	skipped := 0
	for _, rel := range slices.Sorted(maps.Keys(S)) {
		s, d := S[rel], D[rel]
		crit := s.kind() == 'f' && critical(p.critical, rel)
		if crit && !p.final || s.kind() == 'o' {
			skipped++
			continue
		}
		if d != nil && d.kind() != s.kind() && (d.kind() == 'd' || s.kind() == 'd') && rel != "" {
			rm.add("X", rel)
			d = nil
		}
		switch s.kind() {
		case 'd':
			if d == nil || d.mode&0o7777 != s.mode&0o7777 || d.uid != s.uid || d.gid != s.gid {
				mk.add("D", rel, fmt.Sprintf("%d:%d", s.uid, s.gid), fmt.Sprintf("%o", s.mode&0o7777))
			}
		case 'l':
			if d == nil || d.kind() != 'l' || d.target != s.target {
				cp.add("C", rel)
			}
		case 'f':
			hs, sok := k.srcOf(rel, s)
			hd, dok := k.dstOf(rel, d)
			switch {
			case d == nil || d.kind() != 'f' || s.size != d.size || s.mtime != d.mtime || s.mode != d.mode || s.uid != d.uid || s.gid != d.gid:
				cp.add("C", rel)
			case crit || !sok || !dok:
				cp.add("K", rel)
			case hs != hd:
				cp.add("C", rel)
			}
		}
	}
	if skipped > 0 {
		p.logf("%d files left for the final pass (critical) or not copied (neither file, directory nor link)", skipped)
	}
	// Before anything changes, the manifest says which entries are
	// being changed, so that a run killed half-way is not taken for
	// something else writing to the destination.
	if m == nil {
		origin := "warm"
		if p.final {
			origin = "final"
		}
		m = &manifest{source: p.src, origin: origin, entries: map[string]*mentry{}}
	}
	pending := 0
	for _, w := range []*work{&rm, &mk, &cp} {
		for rel := range w.ops {
			m.entries[rel] = &mentry{kind: 'x'}
			pending++
		}
	}
	if pending > 0 {
		if err := writeManifest(ctx, g, p, m); err != nil {
			return nil, err
		}
	}
	var all work
	all.ops = map[string]bool{}
	for _, w := range []*work{&rm, &mk, &cp} {
		all.b.WriteString(w.b.String())
		all.n += w.n
		maps.Copy(all.ops, w.ops)
	}
	p.logf("%s pass: %d entries in the source, %d operations (%d removals, %d directories, %d copies or checks)", passName(p.final), len(S), all.n, rm.n, mk.n, cp.n)
	o, err := runWork(ctx, g, p, &all, k)
	if err != nil {
		return nil, err
	}
	if gone := slices.Sorted(maps.Keys(o.vanished)); p.final && len(gone) > 0 {
		return nil, fmt.Errorf("%s vanished from the source during the final pass: is the service stopped?", strconv.Quote(gone[0]))
	}
	for rel := range o.copied {
		if s := S[rel]; s != nil && s.kind() == 'f' {
			res.copiedFiles++
			res.copiedBytes += s.size
		}
	}
	if !p.final {
		after, err := list(ctx, g, "", p.dst)
		if err != nil {
			return nil, err
		}
		sum := manifestOf(S, k, func(rel string) bool { return critical(p.critical, rel) })
		res.files, res.bytes, res.manifest = sum.files, sum.bytes, sum.sha
		return res, writeManifest(ctx, g, p, record(m, S, after.trees[0], k, l.now))
	}
	return res, verify(ctx, g, p, m, k, res)
}

func passName(final bool) string {
	if final {
		return "final"
	}
	return "warm"
}

// removedWith: an ancestor of rel is removed already.
func removedWith(removed map[string]bool, rel string) bool {
	for p := path.Dir(rel); p != "." && p != "/"; p = path.Dir(p) {
		if removed[p] {
			return true
		}
	}
	return false
}

// tampered lists the destination's differences from the manifest: what
// the last pass left there, but for the entries it was changing.
func tampered(m *manifest, D ltree) *names {
	var n names
	for rel, d := range D {
		if rel == "" || isTmp(rel) || d.kind() == 'o' { // a socket or a fifo: never copied, not recorded
			continue
		}
		e := m.entries[rel]
		switch {
		case e == nil:
			n.add("added", rel)
		case e.kind == 'x':
		case e.kind != d.kind():
			n.add("changed", rel)
		case e.kind == 'f' && (e.dst.size != d.size || e.dst.mtime != d.mtime):
			n.add("changed", rel)
		case e.kind == 'l' && e.target != d.target:
			n.add("changed", rel)
		}
	}
	for rel, e := range m.entries {
		if D[rel] == nil && e.kind != 'x' {
			n.add("removed", rel)
		}
	}
	return &n
}

func writeManifest(ctx context.Context, g guest, p syncParams, m *manifest) error {
	mf := p.manifestPath()
	if err := g.write(ctx, mf, m.encode()); err != nil {
		return fmt.Errorf("writing %s: %w", mf, err)
	}
	return nil
}

// record is the manifest a pass leaves: the destination as listed after
// it, each file with its hashes when known; those of a file changed
// within a second of the pass's start (now) are not kept, as a change in
// the same second would not show in its mtime.
func record(m *manifest, S, D ltree, k known, now int64) *manifest {
	out := &manifest{source: m.source, origin: m.origin, entries: map[string]*mentry{}}
	for rel, d := range D {
		if rel == "" || isTmp(rel) {
			continue
		}
		e := &mentry{kind: d.kind(), src: sideSum{size: -1, sum: "-"}, dst: sideSum{d.size, d.mtime, "-"}, target: d.target}
		switch e.kind {
		case 'o':
			continue
		case 'f':
			if h, ok := k.dstOf(rel, d); ok {
				e.dst.sum = h
			}
			if s := S[rel]; s != nil && s.kind() == 'f' {
				e.src = sideSum{s.size, s.mtime, "-"}
				if h, ok := k.srcOf(rel, s); ok {
					e.src.sum = h
				}
			}
			if e.src.mtime >= now-1 || e.dst.mtime >= now-1 {
				e.src.sum, e.dst.sum = "-", "-" // racy: hashed again next time
			}
		}
		out.entries[rel] = e
	}
	return out
}

// summary is a tree's canonical manifest: its SHA-256, files and bytes.
type summary struct {
	files, bytes int64
	sha          string
}

// manifestOf is the canonical manifest of the source (skip's files left
// out of it, not of the count): sorted lines "d PATH", "f SIZE SHA256
// PATH", "l PATH TARGET", Go-quoted.
func manifestOf(S ltree, k known, skip func(string) bool) summary {
	h := sha256.New()
	var out summary
	for _, rel := range slices.Sorted(maps.Keys(S)) {
		s := S[rel]
		if rel == "" {
			continue
		}
		switch s.kind() {
		case 'd':
			fmt.Fprintf(h, "d %s\n", strconv.Quote(rel))
		case 'l':
			fmt.Fprintf(h, "l %s %s\n", strconv.Quote(rel), strconv.Quote(s.target))
		case 'f':
			out.files++
			out.bytes += s.size
			if skip(rel) {
				continue
			}
			sum, ok := k.srcOf(rel, s)
			if !ok {
				sum = "-"
			}
			fmt.Fprintf(h, "f %d %s %s\n", s.size, sum, strconv.Quote(rel))
		}
	}
	out.sha = hex.EncodeToString(h.Sum(nil))
	return out
}

// verify lists both trees again after the final pass's copies, hashes
// what the pass does not know the content of at its current size and
// mtime, and compares the two manifests.
func verify(ctx context.Context, g guest, p syncParams, m *manifest, k known, res *syncResult) error {
	l, err := list(ctx, g, p.workPath(), p.src, p.dst)
	if err != nil {
		return err
	}
	S, D := l.trees[0], l.trees[1]
	if S == nil || D == nil || l.incomplete[0] || l.incomplete[1] {
		return errors.New("the trees could not be listed again to verify the copy")
	}
	var again work
	for rel, s := range S {
		if d := D[rel]; s.kind() == 'f' && d != nil && d.kind() == 'f' && s.size == d.size {
			_, sok := k.srcOf(rel, s)
			_, dok := k.dstOf(rel, d)
			if !sok || !dok {
				again.add("H", rel)
			}
		}
	}
	if again.n > 0 {
		p.logf("verify: hashing %d files again (changed since they were hashed)", again.n)
		if _, err := runWork(ctx, g, p, &again, k); err != nil {
			return err
		}
	}
	var n names
	for _, rel := range slices.Sorted(maps.Keys(S)) {
		s, d := S[rel], D[rel]
		if s.kind() == 'o' {
			continue
		}
		switch {
		case d == nil:
			n.add("missing from the destination", rel)
		case d.kind() != s.kind():
			n.add("of another type", rel)
		case s.kind() == 'l' && s.target != d.target:
			n.add("a link to elsewhere", rel)
		case s.kind() == 'f' && s.size != d.size:
			n.add("of another size", rel)
		case s.kind() == 'f':
			hs, sok := k.srcOf(rel, s)
			hd, dok := k.dstOf(rel, d)
			switch {
			case !sok || !dok:
				n.add("changed while hashed", rel)
			case hs != hd:
				n.add("of another content", rel)
			}
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(D)) {
		if S[rel] == nil && D[rel].kind() != 'o' {
			n.add("extra in the destination", rel)
		}
	}
	sum := manifestOf(S, k, func(string) bool { return false })
	res.files, res.bytes, res.manifest = sum.files, sum.bytes, sum.sha
	if err := writeManifest(ctx, g, p, record(m, S, D, k, l.now)); err != nil {
		return err
	}
	if err := n.err("the copy differs from the source"); err != nil {
		return err
	}
	p.logf("verified: %d files, %d bytes, manifest sha256 %s", res.files, res.bytes, res.manifest)
	return nil
}

// sizeOf lists the source only (the plan): its files and bytes, and
// those of the critical files.
func sizeOf(ctx context.Context, g guest, src string, globs []string) (all, crit summary, ok bool, err error) {
	l, err := list(ctx, g, "", src)
	if err != nil || l.trees[0] == nil {
		return all, crit, false, err
	}
	for rel, s := range l.trees[0] {
		if s.kind() != 'f' {
			continue
		}
		all.files++
		all.bytes += s.size
		if critical(globs, rel) {
			crit.files++
			crit.bytes += s.size
		}
	}
	return all, crit, true, nil
}

// since is a pass's duration in seconds, to the millisecond.
func since(t time.Time) float64 { return float64(time.Since(t).Milliseconds()) / 1000 }

// syncStateDir is where, on the instance's own root disk, the passes keep
// each destination's manifest and work file. Beside the destination they
// would be on the data volume, and a disk attached to a running
// container is hidden from Incus' files API, which reads the container's
// root filesystem from the host (the exec API's commands see it).
const syncStateDir = "/var/lib/migrate-sync"

// manifestPath is where the manifest of the copy at dst is kept.
func manifestPath(dst string) string { return syncParams{dst: dst}.manifestPath() }

// workPath is where a pass's work file for dst is written.
func workPath(dst string) string { return syncParams{dst: dst}.workPath() }

func (p syncParams) stateDir() string {
	if p.state != "" {
		return p.state
	}
	return syncStateDir
}

func (p syncParams) manifestPath() string {
	return p.stateDir() + "/" + url.PathEscape(p.dst) + manifestSuffix
}

func (p syncParams) workPath() string { return p.stateDir() + "/" + url.PathEscape(p.dst) + workSuffix }
