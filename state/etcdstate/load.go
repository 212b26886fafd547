package etcdstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/homelab-migrate/migrate/state"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys under the prefix.
const (
	keyLock     = "lock"
	keyHead     = "head"
	keyMeta     = "snapshot/meta"
	snapDir     = "snapshot/"
	journalDir  = "journal/"
	layout      = 1
	chunkSize   = 512 << 10
	maxTxnBytes = 1 << 20 // of journal entries per transaction, under etcd's 1.5 MiB
	maxTxnOps   = 100     // under etcd's default of 128 operations
)

// meta is snapshot/meta.
type meta struct {
	Layout     int    `json:"layout"`
	Lineage    string `json:"lineage"`
	Serial     uint64 `json:"serial"`
	Generation string `json:"generation"`
	Chunks     int    `json:"chunks"`
	Bytes      int    `json:"bytes"`
	SHA256     string `json:"sha256"`
}

// head is the head key.
type head struct {
	Serial  uint64 `json:"serial"`
	Lineage string `json:"lineage"`
}

func journalKey(seq uint64) string { return fmt.Sprintf("%s%020d", journalDir, seq) }

func chunkKey(gen string, i int) string { return fmt.Sprintf("%s%s/%06d", snapDir, gen, i) }

// loaded is what read found.
type loaded struct {
	snap    *state.Snapshot // nil: no state yet
	gen     string
	headRev int64 // ModRevision of head; 0 when absent
	journal int   // entries under journal/
	version int   // the snapshot's format version
	orphans []string
	rev     int64
}

// read loads the state under the prefix at one revision.
func (s *Store) read(ctx context.Context) (*loaded, error) {
	for attempt := 0; ; attempt++ {
		kvs, rev, err := s.getAll(ctx)
		if errors.Is(err, rpctypesErrCompacted) && attempt < 3 {
			continue // compacted between pages: read again
		}
		if err != nil {
			return nil, s.requestErr("reading the state", err)
		}
		return s.parse(kvs, rev)
	}
}

// getAll reads every key under the prefix, in pages, at the revision of
// the first page.
func (s *Store) getAll(ctx context.Context) ([]*mvccpb.KeyValue, int64, error) {
	var all []*mvccpb.KeyValue
	from, end := s.prefix, clientv3.GetPrefixRangeEnd(s.prefix)
	var rev int64
	for {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout())
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		all = append(all, resp.Kvs...)
		if !resp.More || len(resp.Kvs) == 0 {
			return all, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (s *Store) unusable(key string, err error, hint string) error {
	if hint == "" {
		hint = "it was left untouched. Restore the state from a copy (migrate state push), or delete the keys under the prefix to start from an empty state"
	}
	return &state.UnusableError{Path: fmt.Sprintf("%s key %s%s", s.cfg.where(), s.prefix, key), Err: err, Hint: hint}
}

// keySet is the keys under the prefix, sorted by what they hold.
type keySet struct {
	meta    *meta
	head    *head
	headRev int64
	chunks  map[string]map[int][]byte // generation -> index -> chunk
	entries []*mvccpb.KeyValue        // under journal/
	foreign []string                  // keys migrate did not write
}

// sortKeys sorts kvs by what they hold, decoding head and meta.
func (s *Store) sortKeys(kvs []*mvccpb.KeyValue) (*keySet, error) {
	k := &keySet{chunks: map[string]map[int][]byte{}}
	for _, kv := range kvs {
		key := strings.TrimPrefix(string(kv.Key), s.prefix)
		switch {
		case key == keyLock:
		case key == keyHead:
			k.head = new(head)
			if err := strictJSON(kv.Value, k.head); err != nil {
				return nil, s.unusable(key, err, "")
			}
			k.headRev = kv.ModRevision
		case key == keyMeta:
			k.meta = new(meta)
			if err := strictJSON(kv.Value, k.meta); err != nil {
				return nil, s.unusable(key, err, "")
			}
		case strings.HasPrefix(key, journalDir):
			if _, err := strconv.ParseUint(strings.TrimPrefix(key, journalDir), 10, 64); err != nil {
				k.foreign = append(k.foreign, key)
				continue
			}
			k.entries = append(k.entries, kv)
		case strings.HasPrefix(key, snapDir):
			gen, n, ok := strings.Cut(strings.TrimPrefix(key, snapDir), "/")
			i, err := strconv.Atoi(n)
			if !ok || err != nil || len(n) != 6 {
				k.foreign = append(k.foreign, key)
				continue
			}
			if k.chunks[gen] == nil {
				k.chunks[gen] = map[int][]byte{}
			}
			k.chunks[gen][i] = kv.Value
		default:
			k.foreign = append(k.foreign, key)
		}
	}
	return k, nil
}

// parse makes the state of the keys read at rev: the snapshot of meta's
// generation, with the journal after it, which must end where head says.
func (s *Store) parse(kvs []*mvccpb.KeyValue, rev int64) (*loaded, error) {
	k, err := s.sortKeys(kvs)
	if err != nil {
		return nil, err
	}
	l := &loaded{rev: rev, headRev: k.headRev}
	if len(k.foreign) > 0 {
		return nil, fmt.Errorf("%s: the prefix holds %d keys migrate did not write (%s%s...): it is not a migrate state; "+
			"choose a prefix of its own for this state", s.cfg.where(), len(k.foreign), s.prefix, k.foreign[0])
	}
	m, h := k.meta, k.head
	if m == nil {
		if h != nil || len(k.entries) > 0 {
			return nil, s.unusable(keyMeta, errors.New("missing, while head or journal entries exist"), "")
		}
		for gen := range k.chunks {
			l.orphans = append(l.orphans, gen)
		}
		return l, nil
	}
	if m.Layout != layout {
		return nil, s.unusable(keyMeta, fmt.Errorf("layout %d, this migrate knows layout %d", m.Layout, layout), "upgrade migrate")
	}
	snap, version, err := s.snapshot(m, k.chunks[m.Generation])
	if err != nil {
		return nil, err
	}
	l.version = version
	for gen := range k.chunks {
		if gen != m.Generation {
			l.orphans = append(l.orphans, gen)
		}
	}
	if l.journal, err = s.replay(snap, version, k.entries); err != nil {
		return nil, err
	}
	if h == nil || h.Serial != snap.Serial || h.Lineage != snap.Lineage {
		return nil, s.unusable(keyHead, fmt.Errorf("head %+v, the snapshot and journal end at serial %d of lineage %s", h, snap.Serial, snap.Lineage), "")
	}
	l.snap, l.gen = snap, m.Generation
	return l, nil
}

// snapshot joins the chunks of m's generation and decodes them, checking
// them against m: their number, size and hash, the lineage and serial. It
// also returns the snapshot's format version.
func (s *Store) snapshot(m *meta, chunks map[int][]byte) (*state.Snapshot, int, error) {
	var buf bytes.Buffer
	for i := range m.Chunks {
		c, ok := chunks[i]
		if !ok {
			return nil, 0, s.unusable(chunkKey(m.Generation, i), errors.New("missing"), "")
		}
		buf.Write(c)
	}
	if len(chunks) != m.Chunks {
		return nil, 0, s.unusable(keyMeta, fmt.Errorf("%d chunks under generation %s, meta says %d", len(chunks), m.Generation, m.Chunks), "")
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := hex.EncodeToString(sum[:]); got != m.SHA256 || buf.Len() != m.Bytes {
		return nil, 0, s.unusable(snapDir+m.Generation+"/", fmt.Errorf("the snapshot's %d bytes hash to %s, meta says %d bytes, %s", buf.Len(), got, m.Bytes, m.SHA256), "")
	}
	snap, version, err := state.DecodeSnapshotVersion(buf.Bytes())
	if nv := (*state.NewerVersionError)(nil); errors.As(err, &nv) {
		hint := "upgrade migrate"
		if nv.MigrateVersion != "" {
			hint += " to " + nv.MigrateVersion + " or later"
		}
		return nil, 0, s.unusable(snapDir+m.Generation+"/", err, hint+"; the state was left untouched")
	}
	if err != nil {
		return nil, 0, s.unusable(snapDir+m.Generation+"/", err, "")
	}
	if snap.Lineage != m.Lineage || snap.Serial != m.Serial {
		return nil, 0, s.unusable(keyMeta, fmt.Errorf("lineage %s serial %d, the snapshot's are %s, %d", m.Lineage, m.Serial, snap.Lineage, snap.Serial), "")
	}
	return snap, version, nil
}

// replay applies the journal entries after the snapshot to it, in order,
// and returns how many entries there are past it; an entry that is
// damaged, of another state or out of order makes the state unusable.
// The entries are in the snapshot's format version.
func (s *Store) replay(snap *state.Snapshot, version int, entries []*mvccpb.KeyValue) (int, error) {
	n := 0
	for _, kv := range entries {
		key := strings.TrimPrefix(string(kv.Key), s.prefix)
		e, err := state.DecodeEntryOf(kv.Value, version)
		switch {
		case err != nil:
		case journalKey(e.Seq) != key:
			err = fmt.Errorf("holds seq %d", e.Seq)
		case e.Lineage != snap.Lineage:
			err = fmt.Errorf("belongs to another state: lineage %s, the snapshot's is %s", e.Lineage, snap.Lineage)
		case e.Seq <= snap.Serial:
			continue // already in the snapshot
		case e.Seq != snap.Serial+1:
			err = fmt.Errorf("follows serial %d: entries are missing", snap.Serial)
		}
		if err != nil {
			return 0, s.unusable(key, err, "")
		}
		snap.Apply(e.Step)
		snap.Serial = e.Seq
		n++
	}
	return n, nil
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
