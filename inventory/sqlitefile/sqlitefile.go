package sqlitefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf16"
)

// DB is a database file opened for reading.
type DB struct {
	r        io.ReaderAt
	pageSize int
	usable   int // the page size less the bytes each page reserves
	pages    uint32
	encoding byte              // 1 UTF-8, 2 UTF-16le, 3 UTF-16be
	wal      map[uint32][]byte // the pages the write-ahead log holds newer
}

// ErrNotSQLite is returned for a file that is not an SQLite 3 database.
var ErrNotSQLite = errors.New("not an SQLite 3 database (no \"SQLite format 3\" header)")

const headerMagic = "SQLite format 3\x00"

// Open reads the header of the database db (size bytes) and, when wal
// is not nil, its write-ahead log (walSize bytes).
func Open(db io.ReaderAt, size int64, wal io.ReaderAt, walSize int64) (*DB, error) {
	h := make([]byte, 100)
	if _, err := db.ReadAt(h, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ErrNotSQLite
		}
		return nil, err
	}
	if string(h[:16]) != headerMagic {
		return nil, ErrNotSQLite
	}
	d := &DB{r: db, pageSize: int(binary.BigEndian.Uint16(h[16:]))}
	if d.pageSize == 1 {
		d.pageSize = 65536
	}
	if d.pageSize < 512 || d.pageSize&(d.pageSize-1) != 0 {
		return nil, fmt.Errorf("page size %d in the header: not a power of two from 512 to 65536", d.pageSize)
	}
	d.usable = d.pageSize - int(h[20])
	if d.usable < 480 {
		return nil, fmt.Errorf("%d reserved bytes per page leave too little room", h[20])
	}
	switch enc := binary.BigEndian.Uint32(h[56:]); enc {
	case 0:
		d.encoding = 1 // a database with no table yet
	case 1, 2, 3:
		d.encoding = byte(enc)
	default:
		return nil, fmt.Errorf("text encoding %d in the header: not 1, 2 or 3", enc)
	}
	// The size in the header counts only when the file was last written
	// by a SQLite that keeps it (its change counter matches).
	d.pages = uint32(size / int64(d.pageSize))
	if n := binary.BigEndian.Uint32(h[28:]); n > 0 && binary.BigEndian.Uint32(h[24:]) == binary.BigEndian.Uint32(h[92:]) {
		d.pages = min(d.pages, n)
	}
	if wal != nil && walSize > 0 {
		pages, n, err := readWAL(wal, walSize, d.pageSize)
		if err != nil {
			return nil, fmt.Errorf("the write-ahead log: %w", err)
		}
		if n > 0 {
			d.wal, d.pages = pages, n
		}
	}
	return d, nil
}

// page is page n (1-based), from the write-ahead log when it has it.
func (d *DB) page(n uint32) ([]byte, error) {
	if n == 0 || n > d.pages {
		return nil, fmt.Errorf("page %d: past the database's %d pages", n, d.pages)
	}
	if p, ok := d.wal[n]; ok {
		return p, nil
	}
	p := make([]byte, d.pageSize)
	if _, err := d.r.ReadAt(p, int64(n-1)*int64(d.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", n, err)
	}
	return p, nil
}

// Select returns the named columns of every row of a table, in rowid
// order. A value is nil, int64, float64, string or []byte.
func (d *DB) Select(table string, columns ...string) ([][]any, error) {
	root, sql, err := d.table(table)
	if err != nil {
		return nil, err
	}
	defs, withoutRowid, err := columnDefs(sql)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", table, err)
	}
	if withoutRowid {
		return nil, fmt.Errorf("table %s is WITHOUT ROWID: not read here", table)
	}
	idx := make([]int, len(columns))
	for i, c := range columns {
		idx[i] = -1
		for j, def := range defs {
			if strings.EqualFold(def.name, c) {
				idx[i] = j
			}
		}
		if idx[i] < 0 {
			return nil, fmt.Errorf("table %s has no column %s", table, c)
		}
	}
	var rows [][]any
	err = d.walk(root, func(rowid int64, rec []any) error {
		row := make([]any, len(idx))
		for i, j := range idx {
			switch {
			case j < len(rec):
				row[i] = rec[j]
			case defs[j].rowidAlias:
			default:
				continue // added by ALTER TABLE after this row: NULL
			}
			if row[i] == nil && defs[j].rowidAlias {
				row[i] = rowid
			}
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", table, err)
	}
	return rows, nil
}

// table is a table's root page and its CREATE TABLE statement, from the
// schema table (sqlite_schema, whose root is page 1).
func (d *DB) table(name string) (uint32, string, error) {
	var root uint32
	var sql string
	err := d.walk(1, func(_ int64, rec []any) error {
		if len(rec) < 5 || rec[0] != "table" {
			return nil
		}
		if n, _ := rec[1].(string); strings.EqualFold(n, name) {
			r, _ := rec[3].(int64)
			root, sql = uint32(r), fmt.Sprint(rec[4])
		}
		return nil
	})
	if err != nil {
		return 0, "", fmt.Errorf("the schema: %w", err)
	}
	if root == 0 {
		return 0, "", fmt.Errorf("no table %s in the database", name)
	}
	return root, sql, nil
}

// Page types of table b-trees.
const (
	interiorTable = 0x05
	leafTable     = 0x0d
)

// walk calls fn for every row of the table b-tree rooted at page root.
func (d *DB) walk(root uint32, fn func(rowid int64, rec []any) error) error {
	seen := map[uint32]bool{}
	stack := []uint32{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			return fmt.Errorf("page %d: reached twice (a loop in the b-tree)", n)
		}
		seen[n] = true
		p, err := d.page(n)
		if err != nil {
			return err
		}
		hdr := 0
		if n == 1 {
			hdr = 100 // the file header comes first on page 1
		}
		cells, err := d.cellOffsets(p, hdr, n)
		if err != nil {
			return err
		}
		switch p[hdr] {
		case interiorTable:
			// Children are visited left to right: pushed in reverse.
			stack = append(stack, binary.BigEndian.Uint32(p[hdr+8:]))
			for i := len(cells) - 1; i >= 0; i-- {
				if cells[i]+4 > len(p) {
					return fmt.Errorf("page %d: cell %d past the page", n, i)
				}
				stack = append(stack, binary.BigEndian.Uint32(p[cells[i]:]))
			}
		case leafTable:
			for i, off := range cells {
				rowid, rec, err := d.leafCell(p, off)
				if err != nil {
					return fmt.Errorf("page %d, cell %d: %w", n, i, err)
				}
				if err := fn(rowid, rec); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("page %d: type %#x is not a table b-tree page", n, p[hdr])
		}
	}
	return nil
}

// cellOffsets are the offsets of a b-tree page's cells.
func (d *DB) cellOffsets(p []byte, hdr int, n uint32) ([]int, error) {
	size := 8
	if p[hdr] == interiorTable {
		size = 12
	}
	count := int(binary.BigEndian.Uint16(p[hdr+3:]))
	start := hdr + size
	if start+2*count > d.usable {
		return nil, fmt.Errorf("page %d: %d cells do not fit", n, count)
	}
	offs := make([]int, count)
	for i := range offs {
		offs[i] = int(binary.BigEndian.Uint16(p[start+2*i:]))
		if offs[i] < start+2*count || offs[i] >= d.usable {
			return nil, fmt.Errorf("page %d: cell %d at offset %d, outside the cell area", n, i, offs[i])
		}
	}
	return offs, nil
}

// leafCell decodes a table leaf cell: its rowid and its record, with
// the part that spilled to overflow pages.
func (d *DB) leafCell(p []byte, off int) (int64, []any, error) {
	size, k := varint(p[off:])
	if k == 0 {
		return 0, nil, errors.New("truncated payload size")
	}
	off += k
	rowid, k := varint(p[off:])
	if k == 0 {
		return 0, nil, errors.New("truncated rowid")
	}
	off += k
	if size > 1<<30 {
		return 0, nil, fmt.Errorf("payload of %d bytes", size)
	}
	payload, err := d.payload(p, off, int(size))
	if err != nil {
		return 0, nil, err
	}
	rec, err := d.record(payload)
	return int64(rowid), rec, err
}

// payload is a cell's payload of size bytes starting at off, followed
// through its overflow pages when it does not fit on the page.
func (d *DB) payload(p []byte, off, size int) ([]byte, error) {
	u := d.usable
	local := size
	if maxLocal := u - 35; size > maxLocal {
		minLocal := (u-12)*32/255 - 23
		local = minLocal + (size-minLocal)%(u-4)
		if local > maxLocal {
			local = minLocal
		}
	}
	if off+local > len(p) || (local < size && off+local+4 > len(p)) {
		return nil, errors.New("payload past the page")
	}
	out := make([]byte, 0, size)
	out = append(out, p[off:off+local]...)
	if local == size {
		return out, nil
	}
	next := binary.BigEndian.Uint32(p[off+local:])
	seen := map[uint32]bool{}
	for len(out) < size {
		if next == 0 || seen[next] {
			return nil, fmt.Errorf("overflow chain broken at page %d", next)
		}
		seen[next] = true
		o, err := d.page(next)
		if err != nil {
			return nil, err
		}
		n := min(size-len(out), u-4)
		out = append(out, o[4:4+n]...)
		next = binary.BigEndian.Uint32(o)
	}
	return out, nil
}

// record decodes a record: its header of serial types, then the values.
func (d *DB) record(b []byte) ([]any, error) {
	hsize, k := varint(b)
	if k == 0 || hsize > uint64(len(b)) || int(hsize) < k {
		return nil, errors.New("record header past the record")
	}
	var types []uint64
	for h := b[k:hsize]; len(h) > 0; {
		t, n := varint(h)
		if n == 0 {
			return nil, errors.New("truncated record header")
		}
		types, h = append(types, t), h[n:]
	}
	body := b[hsize:]
	vals := make([]any, len(types))
	for i, t := range types {
		n := serialSize(t)
		if n < 0 || n > len(body) {
			return nil, fmt.Errorf("column %d: serial type %d past the record", i, t)
		}
		vals[i] = d.value(t, body[:n])
		body = body[n:]
	}
	return vals, nil
}

// serialSize is the size in bytes of a value of serial type t (-1 for
// the reserved types).
func serialSize(t uint64) int {
	switch {
	case t <= 4:
		return []int{0, 1, 2, 3, 4}[t]
	case t == 5:
		return 6
	case t == 6 || t == 7:
		return 8
	case t == 8 || t == 9:
		return 0
	case t >= 12 && t < 1<<31:
		return int(t-12) / 2
	}
	return -1
}

func (d *DB) value(t uint64, b []byte) any {
	switch {
	case t == 0:
		return nil
	case t <= 6:
		v := int64(int8(b[0])) // sign-extended big-endian integer
		for _, c := range b[1:] {
			v = v<<8 | int64(c)
		}
		return v
	case t == 7:
		return math.Float64frombits(binary.BigEndian.Uint64(b))
	case t == 8:
		return int64(0)
	case t == 9:
		return int64(1)
	case t%2 == 0:
		return bytes.Clone(b)
	}
	return d.text(b)
}

// text decodes a text value in the database's encoding.
func (d *DB) text(b []byte) string {
	if d.encoding == 1 {
		return string(b)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if d.encoding == 3 {
		order = binary.BigEndian
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = order.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// varint decodes SQLite's big-endian variable-length integer (1 to 9
// bytes); k is 0 when b ends first.
func varint(b []byte) (v uint64, k int) {
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0
		}
		if i == 8 {
			return v<<8 | uint64(b[i]), 9
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return v, 9
}
