package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HighWater keeps, outside the stream, the position of the last commit the
// committer acknowledged: evidence of what the stream must hold, so that a
// start can tell a stream that a damaged disk cut short (nats-server drops
// every message from a damaged record on, and starts) from a whole one.
type HighWater interface {
	// Load returns the mark kept, ok false when none was ever kept.
	Load(ctx context.Context) (mark Head, ok bool, err error)
	// Advance records head as acknowledged. The committer calls it before
	// it answers the batch that ends at head; it must not wait longer
	// than a local write.
	Advance(head Head)
	// Close writes out the last mark and releases what it holds.
	Close() error
}

// highWaterRecord is the encoded size of one slot of a high-water file:
// magic, stream sequence, chain position, hash, CRC-32 of the rest.
const highWaterRecord = 4 + 8 + 8 + sha256.Size + 4

// highWaterMagic opens every slot of a high-water file.
var highWaterMagic = [4]byte{'T', 'H', 'W', '1'}

// HighWaterFile is a HighWater in a file of the data directory, for the
// embedded default. Each mark is written with one pwrite before its batch
// is answered, so that no kill of the process loses it, and synced to the
// disk by a goroutine of its own, at most every highWaterSyncEvery, so
// that the write path never waits for a sync: a power cut may lose the
// marks of the last moments, never invent one. Marks alternate between two slots, so that a write torn by
// a power cut leaves the other slot whole.
type HighWaterFile struct {
	f      *os.File
	mu     sync.Mutex
	n      uint64 // marks written, which picks the slot
	err    error  // the first write or sync error
	closed bool
	dirty  chan struct{}
	done   chan struct{}
}

// OpenHighWaterFile opens (creating it if needed) the high-water file at
// path.
func OpenHighWaterFile(path string) (*HighWaterFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open high-water mark: %w", err)
	}
	h := &HighWaterFile{f: f, dirty: make(chan struct{}, 1), done: make(chan struct{})}
	go h.syncer()
	return h, nil
}

// Load implements HighWater: the newer of the two slots that check out.
func (h *HighWaterFile) Load(context.Context) (Head, bool, error) { return loadHighWater(h.f) }

// ReadHighWaterFile reads the mark of the high-water file at path, for a
// reader that must not write it (an audit); ok is false when there is no
// file or no mark.
func ReadHighWaterFile(path string) (mark Head, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Head{}, false, nil
	}
	if err != nil {
		return Head{}, false, fmt.Errorf("read high-water mark: %w", err)
	}
	defer f.Close()
	return loadHighWater(f)
}

// loadHighWater reads the newer of the two slots of f that check out.
func loadHighWater(f *os.File) (Head, bool, error) {
	buf := make([]byte, 2*highWaterRecord)
	n, err := f.ReadAt(buf, 0)
	if err != nil && n < highWaterRecord {
		if n == 0 {
			return Head{}, false, nil
		}
		return Head{}, false, fmt.Errorf("read high-water mark %s: %w", f.Name(), err)
	}
	var best Head
	found := false
	for off := 0; off+highWaterRecord <= n; off += highWaterRecord {
		if m, ok := decodeHighWater(buf[off : off+highWaterRecord]); ok && (!found || m.Sequence > best.Sequence) {
			best, found = m, true
		}
	}
	if !found {
		return Head{}, false, fmt.Errorf("high-water mark %s: no slot checks out: %w", f.Name(), ErrIntegrity)
	}
	return best, true, nil
}

// Advance implements HighWater.
func (h *HighWaterFile) Advance(head Head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	rec := encodeHighWater(head)
	if _, err := h.f.WriteAt(rec[:], int64(h.n%2)*highWaterRecord); err != nil && h.err == nil {
		h.err = err
	}
	h.n++
	select {
	case h.dirty <- struct{}{}:
	default:
	}
}

// highWaterSyncEvery spaces the syncs of a high-water file: each is a
// flush of the disk that the stream's own syncs, which answers wait for,
// would queue behind. A power cut may lose that much of the marks; a
// killed process loses none (each mark is written before its answer).
const highWaterSyncEvery = 100 * time.Millisecond

// syncer syncs the file after marks were written, one sync covering every
// mark written before it started, at most every highWaterSyncEvery.
func (h *HighWaterFile) syncer() {
	var last time.Time
	for range h.dirty {
		if wait := highWaterSyncEvery - time.Since(last); wait > 0 {
			time.Sleep(wait) // pacing the flushes; Close syncs what is left
		}
		last = time.Now()
		if err := h.f.Sync(); err != nil {
			h.mu.Lock()
			if h.err == nil {
				h.err = err
			}
			h.mu.Unlock()
		}
	}
	close(h.done)
}

// Close implements HighWater.
func (h *HighWaterFile) Close() error {
	h.mu.Lock()
	h.closed = true
	close(h.dirty)
	h.mu.Unlock()
	<-h.done
	err := errors.Join(h.f.Sync(), h.f.Close())
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return fmt.Errorf("high-water mark %s: %w", h.f.Name(), h.err)
	}
	return err
}

func encodeHighWater(head Head) [highWaterRecord]byte {
	var b [highWaterRecord]byte
	copy(b[:4], highWaterMagic[:])
	binary.BigEndian.PutUint64(b[4:], head.Sequence)
	binary.BigEndian.PutUint64(b[12:], head.ChainSeq)
	copy(b[20:], head.Hash[:])
	binary.BigEndian.PutUint32(b[20+sha256.Size:], crc32.ChecksumIEEE(b[:20+sha256.Size]))
	return b
}

func decodeHighWater(b []byte) (Head, bool) {
	if [4]byte(b[:4]) != highWaterMagic || binary.BigEndian.Uint32(b[20+sha256.Size:]) != crc32.ChecksumIEEE(b[:20+sha256.Size]) {
		return Head{}, false
	}
	h := Head{Sequence: binary.BigEndian.Uint64(b[4:]), ChainSeq: binary.BigEndian.Uint64(b[12:])}
	copy(h.Hash[:], b[20:20+sha256.Size])
	return h, true
}

// HighWaterBucket is the KV bucket of a cluster's high-water marks, one
// key a chain.
const HighWaterBucket = "TRESOR_HIGH_WATER"

// HighWaterKV is a HighWater in a replicated KV bucket, for a NATS
// cluster, where a writer may take over on another machine. A mark is put
// by a goroutine of its own, the newest replacing any not yet sent, so
// that the write path never waits for the cluster: a lost node may cost
// the marks of its last moments, never invent one.
type HighWaterKV struct {
	kv      jetstream.KeyValue
	key     string
	mu      sync.Mutex
	pending *Head
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	err     error
}

// OpenHighWaterKV opens (creating it if needed) the high-water bucket on
// the store's cluster, for chain.
func (s *NATSStore) OpenHighWaterKV(ctx context.Context, chain string) (*HighWaterKV, error) {
	if err := ValidateChain(chain); err != nil {
		return nil, err
	}
	kv, err := OpenPatiently(ctx, s.cfg.Logger, "bucket "+HighWaterBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: HighWaterBucket,
			Description: "Tresor: the last acknowledged position of each chain, evidence of what the stream must hold",
			History:     1, Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas})
	})
	if err != nil {
		return nil, fmt.Errorf("open high-water bucket: %w", err)
	}
	// Keyed by stream and chain: two ledgers on one cluster keep their
	// marks apart.
	h := &HighWaterKV{kv: kv, key: s.cfg.Stream + "." + chain, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go h.putter()
	return h, nil
}

// Load implements HighWater.
func (h *HighWaterKV) Load(ctx context.Context) (Head, bool, error) {
	e, err := h.kv.Get(ctx, h.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Head{}, false, nil
	}
	if err != nil {
		return Head{}, false, fmt.Errorf("read high-water mark of chain %s: %w", h.key, err)
	}
	if len(e.Value()) != highWaterRecord {
		return Head{}, false, fmt.Errorf("high-water mark of chain %s: %d bytes: %w", h.key, len(e.Value()), ErrIntegrity)
	}
	m, ok := decodeHighWater(e.Value())
	if !ok {
		return Head{}, false, fmt.Errorf("high-water mark of chain %s does not check out: %w", h.key, ErrIntegrity)
	}
	return m, true, nil
}

// Advance implements HighWater.
func (h *HighWaterKV) Advance(head Head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.pending = &head
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// putter puts the newest pending mark, one put at a time.
func (h *HighWaterKV) putter() {
	defer close(h.done)
	for range h.wake {
		h.mu.Lock()
		m := h.pending
		h.pending = nil
		h.mu.Unlock()
		if m == nil {
			continue
		}
		rec := encodeHighWater(*m)
		ctx, cancel := context.WithTimeout(context.Background(), highWaterPutMax)
		_, err := h.kv.Put(ctx, h.key, rec[:])
		cancel()
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
	}
}

// highWaterPutMax bounds one put of a cluster's high-water mark.
const highWaterPutMax = 5 * time.Second

// Close implements HighWater: the last mark is put before it returns.
func (h *HighWaterKV) Close() error {
	h.mu.Lock()
	h.closed = true
	close(h.wake)
	h.mu.Unlock()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending != nil {
		rec := encodeHighWater(*h.pending)
		ctx, cancel := context.WithTimeout(context.Background(), highWaterPutMax)
		defer cancel()
		_, h.err = h.kv.Put(ctx, h.key, rec[:])
	}
	if h.err != nil {
		return fmt.Errorf("high-water mark of chain %s: %w", h.key, h.err)
	}
	return nil
}
