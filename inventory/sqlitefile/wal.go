package sqlitefile

import (
	"encoding/binary"
	"fmt"
	"io"
)

// WAL magic numbers: the checksums' words are little- or big-endian.
const (
	walMagicLE = 0x377f0682
	walMagicBE = 0x377f0683
)

// readWAL reads a write-ahead log as SQLite recovers one: frame after
// frame while each carries the header's salts and a checksum that
// continues the chain; the pages of frames up to the last commit frame
// (one whose database size is set) are the newest. n is the database's
// size in pages after that commit (0: no committed frame).
func readWAL(r io.ReaderAt, size int64, pageSize int) (pages map[uint32][]byte, n uint32, err error) {
	hdr := make([]byte, 32)
	if size < 32 {
		return nil, 0, nil // an empty log: nothing newer than the file
	}
	if _, err := r.ReadAt(hdr, 0); err != nil {
		return nil, 0, err
	}
	var order binary.ByteOrder
	switch binary.BigEndian.Uint32(hdr) {
	case walMagicLE:
		order = binary.LittleEndian
	case walMagicBE:
		order = binary.BigEndian
	default:
		return nil, 0, fmt.Errorf("bad magic %#x", binary.BigEndian.Uint32(hdr))
	}
	if ps := int(binary.BigEndian.Uint32(hdr[8:])); ps != pageSize {
		return nil, 0, nil // a log of another page size is not this database's: SQLite ignores it
	}
	s0, s1 := walChecksum(order, hdr[:24], 0, 0)
	if s0 != binary.BigEndian.Uint32(hdr[24:]) || s1 != binary.BigEndian.Uint32(hdr[28:]) {
		return nil, 0, nil // a torn header: the log holds nothing valid
	}
	salt := hdr[16:24]
	pages, pending := map[uint32][]byte{}, map[uint32][]byte{}
	frame := make([]byte, 24+pageSize)
	for off := int64(32); off+int64(len(frame)) <= size; off += int64(len(frame)) {
		if _, err := r.ReadAt(frame, off); err != nil {
			return nil, 0, err
		}
		if string(frame[8:16]) != string(salt) {
			break // a frame of an earlier log, before it was restarted
		}
		s0, s1 = walChecksum(order, frame[:8], s0, s1)
		s0, s1 = walChecksum(order, frame[24:], s0, s1)
		if s0 != binary.BigEndian.Uint32(frame[16:]) || s1 != binary.BigEndian.Uint32(frame[20:]) {
			break // torn: written by a crash mid-transaction
		}
		pgno := binary.BigEndian.Uint32(frame)
		pending[pgno] = append([]byte(nil), frame[24:]...)
		if commit := binary.BigEndian.Uint32(frame[4:]); commit != 0 {
			for k, v := range pending {
				pages[k] = v
			}
			clear(pending)
			n = commit
		}
	}
	return pages, n, nil
}

// walChecksum continues SQLite's WAL checksum over b (a multiple of 8
// bytes), from s0 and s1.
func walChecksum(order binary.ByteOrder, b []byte, s0, s1 uint32) (uint32, uint32) {
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += order.Uint32(b[i:]) + s1
		s1 += order.Uint32(b[i+4:]) + s0
	}
	return s0, s1
}
