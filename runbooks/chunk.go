package runbooks

import (
	"bytes"
	"maps"
	"runtime"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Big runbook files are parsed in pieces. hclsyntax lexes a whole file
// into one token slice before parsing (about 100 bytes a token, grown by
// doubling), so a generated 3 MB phase of 10,000 steps needs some 200 MB
// at once for tokens that are garbage a moment later. parseChunked cuts
// the file at line starts between body items, parses each piece with
// hclsyntax at its own position, and assembles the same AST the whole
// parse would give (the tests compare the two with reflect.DeepEqual, and
// the fuzzer does for any input). Anything it is not sure of — a heredoc,
// a piece with any diagnostic, a block opening with content on its line —
// sends the file to the ordinary whole-file parse, so diagnostics are
// always hclsyntax's own.

// chunkSize is the size of the pieces; files under twice that are parsed
// whole. A variable so the tests can cut at every item.
var chunkSize = 16 << 10

// parseConfig parses an HCL file, in pieces when it is big.
func parseConfig(src []byte, filename string) (*hcl.File, hcl.Diagnostics) {
	if len(src) >= 2*chunkSize {
		if f := parseChunked(src, filename, chunkSize); f != nil {
			return f, nil
		}
	}
	return hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
}

// layout is what scanLayout finds: the offsets just after each newline
// outside any bracket, string or comment (top), and for every top-level
// block its braces and the line starts directly inside it.
type layout struct {
	top    []int
	blocks []blockSpan
}

type blockSpan struct {
	open, close int   // offsets of { and }
	inner       []int // line starts inside the block's own body
}

// scanLayout walks src tracking brackets, strings, templates and comments.
// It reports false for what it does not follow: heredocs, an unbalanced
// bracket, a newline in a quoted string, an unterminated comment.
func scanLayout(src []byte) (layout, bool) {
	var l layout
	var stack []byte // '{' '[' '(' in expressions, '"' strings, '$' template interpolations
	var cur *blockSpan
	n := len(src)
	top := func() byte {
		if len(stack) == 0 {
			return 0
		}
		return stack[len(stack)-1]
	}
	for i := 0; i < n; i++ {
		c := src[i]
		if top() == '"' {
			switch {
			case c == '\\':
				i++
			case c == '\n':
				return l, false
			case c == '"':
				stack = stack[:len(stack)-1]
			case (c == '$' || c == '%') && i+1 < n && src[i+1] == c && i+2 < n && src[i+2] == '{':
				i += 2 // $${ and %%{ are literal
			case (c == '$' || c == '%') && i+1 < n && src[i+1] == '{':
				stack = append(stack, '$')
				i++
			}
			continue
		}
		switch c {
		case '\n':
			switch {
			case len(stack) == 0:
				l.top = append(l.top, i+1)
			case len(stack) == 1 && stack[0] == '{' && cur != nil:
				cur.inner = append(cur.inner, i+1)
			}
		case '"':
			stack = append(stack, '"')
		case '{', '[', '(':
			if len(stack) == 0 && c == '{' {
				l.blocks = append(l.blocks, blockSpan{open: i, close: -1})
				cur = &l.blocks[len(l.blocks)-1]
			}
			stack = append(stack, c)
		case '}', ']', ')':
			want := map[byte]byte{'}': '{', ']': '[', ')': '('}[c]
			t := top()
			if t != want && !(c == '}' && t == '$') {
				return l, false
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 && c == '}' && cur != nil {
				cur.close = i
				cur = nil
			}
		case '#':
			i = lineEnd(src, i) - 1 // the newline itself is seen next
		case '/':
			if i+1 < n && src[i+1] == '/' {
				i = lineEnd(src, i) - 1
			} else if i+1 < n && src[i+1] == '*' {
				end := bytes.Index(src[i+2:], []byte("*/"))
				if end < 0 {
					return l, false
				}
				i += 2 + end + 1
			}
		case '<':
			if i+1 < n && src[i+1] == '<' {
				return l, false // a heredoc, or a syntax error: the whole parse knows
			}
		}
	}
	return l, len(stack) == 0
}

func lineEnd(src []byte, i int) int {
	if j := bytes.IndexByte(src[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(src)
}

// parseChunked parses src in pieces of about size bytes, or returns nil
// when the whole parse must do it. The pieces are parsed in parallel, then
// assembled in order.
func parseChunked(src []byte, filename string, size int) *hcl.File {
	l, ok := scanLayout(src)
	if !ok {
		return nil
	}
	p := &pieceParser{src: src, filename: filename, lines: newLineIndex(src)}

	// 1. Cut: top-level items between line starts outside any bracket,
	// grouped into pieces; a big block's body is cut in its turn.
	var items []item
	cuts := append(append([]int{0}, l.top...), len(src))
	blocks := l.blocks
	start := 0
	for k := 1; k < len(cuts); k++ {
		a, b := cuts[k-1], cuts[k]
		for len(blocks) > 0 && blocks[0].open < a {
			blocks = blocks[1:]
		}
		var blk *blockSpan
		if len(blocks) > 0 && blocks[0].open < b {
			blk = &blocks[0]
		}
		if blk == nil || blk.close-blk.open < size || !p.splittable(blk, b) {
			if b-start >= size || k == len(cuts)-1 {
				items = append(items, item{piece: p.cut(start, b)})
				start = b
			}
			continue
		}
		if a > start {
			items = append(items, item{piece: p.cut(start, a)})
		}
		inner, ok := p.cutBlock(blk, size)
		if !ok {
			return nil
		}
		items = append(items, item{a: a, b: b, blk: blk, inner: inner})
		start = b
	}

	// 2. Parse every piece.
	p.parseAll()

	// 3. Assemble, in the file's order.
	body := &hclsyntax.Body{Attributes: hclsyntax.Attributes{}, Blocks: hclsyntax.Blocks{}}
	var last *hclsyntax.Body
	for i, it := range items {
		var piece *hclsyntax.Body
		if it.blk == nil {
			piece = it.piece.body
		} else {
			block := p.assembleBlock(it.a, it.blk, it.inner)
			if block == nil {
				return nil
			}
			// The block's line is a piece of its own: a body of just it.
			piece = &hclsyntax.Body{
				Attributes: hclsyntax.Attributes{},
				Blocks:     hclsyntax.Blocks{block},
				SrcRange:   p.rangeOf(it.a, it.b),
				EndRange:   p.rangeOf(it.b, it.b),
			}
		}
		if piece == nil || !merge(body, piece) {
			return nil
		}
		if i == 0 {
			body.SrcRange.Start = piece.SrcRange.Start
		}
		last = piece
	}
	if last == nil {
		return nil
	}
	body.SrcRange.Filename = filename
	body.SrcRange.End = last.SrcRange.End
	body.EndRange = last.EndRange
	return &hcl.File{Body: body, Bytes: src}
}

// item is a top-level piece, or a big block cut into inner pieces.
type item struct {
	piece *piece

	a, b  int // the block's item
	blk   *blockSpan
	inner []*piece
}

// piece is src[a:b], which starts a line, and its parse.
type piece struct {
	a, b int
	body *hclsyntax.Body // nil on any diagnostic
}

// merge adds piece's items to body, false when an attribute repeats (the
// whole parse reports that).
func merge(body, piece *hclsyntax.Body) bool {
	for name := range piece.Attributes {
		if _, dup := body.Attributes[name]; dup {
			return false
		}
	}
	maps.Copy(body.Attributes, piece.Attributes)
	body.Blocks = append(body.Blocks, piece.Blocks...)
	return true
}

type pieceParser struct {
	src      []byte
	filename string
	lines    lineIndex
	pieces   []*piece
}

func (p *pieceParser) cut(a, b int) *piece {
	pc := &piece{a: a, b: b}
	p.pieces = append(p.pieces, pc)
	return pc
}

// parseAll parses the pieces on every core.
func (p *pieceParser) parseAll() {
	next := make(chan *piece)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(p.pieces)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pc := range next {
				pc.body = p.parse(pc.a, pc.b)
			}
		}()
	}
	for _, pc := range p.pieces {
		next <- pc
	}
	close(next)
	wg.Wait()
}

// parse parses src[a:b], which starts a line, at its place in the file;
// nil on any diagnostic.
func (p *pieceParser) parse(a, b int) *hclsyntax.Body {
	f, diags := hclsyntax.ParseConfig(p.src[a:b], p.filename, p.lines.pos(a))
	if len(diags) > 0 || f == nil {
		return nil
	}
	body, _ := f.Body.(*hclsyntax.Body)
	return body
}

// splittable tells whether a top-level item [start of line, b) holding blk
// has the shape cutBlock expects: the opening brace ends its line, the
// closing brace is followed by nothing but blanks up to b, and both lines
// are ASCII up to the braces (so columns are byte counts).
func (p *pieceParser) splittable(blk *blockSpan, b int) bool {
	if blk.close < 0 || blk.close >= b || len(blk.inner) == 0 {
		return false
	}
	if blk.inner[0] != lineEnd(p.src, blk.open)+1 || len(bytes.TrimSpace(p.src[blk.open+1:blk.inner[0]])) != 0 {
		return false
	}
	if len(bytes.Trim(p.src[blk.close+1:b], " \t\r\n")) != 0 {
		return false
	}
	return isASCII(p.src[p.lines.lineStart(blk.open):blk.open]) && isASCII(p.src[p.lines.lineStart(blk.close):blk.close])
}

// cutBlock cuts a big block's body into pieces between the line starts
// directly inside it, up to the line of its closing brace.
func (p *pieceParser) cutBlock(blk *blockSpan, size int) ([]*piece, bool) {
	closeLine := p.lines.lineStart(blk.close)
	if len(bytes.TrimSpace(p.src[closeLine:blk.close])) != 0 {
		return nil, false // something before } on its line
	}
	var out []*piece
	cuts := append(blk.inner, blk.close)
	start := cuts[0]
	for k := 1; k < len(cuts); k++ {
		if cuts[k]-start < size && k < len(cuts)-1 {
			continue
		}
		end := cuts[k]
		if k == len(cuts)-1 {
			end = max(closeLine, start)
		}
		if end > start {
			out = append(out, p.cut(start, end))
		}
		start = end
	}
	return out, true
}

// assembleBlock makes the top-level block starting at a: its header (type,
// labels, opening brace) parsed as an empty block, and its body from the
// parsed inner pieces.
func (p *pieceParser) assembleBlock(a int, blk *blockSpan, inner []*piece) *hclsyntax.Block {
	header := append(append([]byte{}, p.src[a:blk.open+1]...), '}')
	f, diags := hclsyntax.ParseConfig(header, p.filename, p.lines.pos(a))
	if len(diags) > 0 {
		return nil
	}
	hb := f.Body.(*hclsyntax.Body)
	if len(hb.Blocks) != 1 || len(hb.Attributes) != 0 {
		return nil
	}
	block := hb.Blocks[0]
	closeRange := p.rangeOf(blk.close, blk.close+1)
	body := &hclsyntax.Body{
		Attributes: hclsyntax.Attributes{},
		Blocks:     hclsyntax.Blocks{},
		SrcRange:   hcl.RangeBetween(block.OpenBraceRange, closeRange),
		EndRange:   hcl.Range{Filename: p.filename, Start: closeRange.End, End: closeRange.End},
	}
	for _, pc := range inner {
		if pc.body == nil || !merge(body, pc.body) {
			return nil
		}
	}
	block.Body = body
	block.CloseBraceRange = closeRange
	return block
}

func (p *pieceParser) rangeOf(a, b int) hcl.Range {
	return hcl.Range{Filename: p.filename, Start: p.lines.pos(a), End: p.lines.pos(b)}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// lineIndex maps byte offsets to positions; columns are counted in bytes,
// which is right for the ASCII prefixes splittable allows and for line
// starts.
type lineIndex struct{ starts []int }

func newLineIndex(src []byte) lineIndex {
	starts := []int{0}
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return lineIndex{starts}
}

// line returns the 0-based line of offset off.
func (li lineIndex) line(off int) int {
	lo, hi := 0, len(li.starts)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if li.starts[mid] <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func (li lineIndex) lineStart(off int) int { return li.starts[li.line(off)] }

func (li lineIndex) pos(off int) hcl.Pos {
	ln := li.line(off)
	return hcl.Pos{Line: ln + 1, Column: off - li.starts[ln] + 1, Byte: off}
}
