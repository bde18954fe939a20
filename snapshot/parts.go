package snapshot

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PartBytesMax bounds one part of a snapshot. A snapshot is stored
// as parts, each one Object Store object awaited before the next is sent:
// the embedded server refuses (429) a stream's ingest past 128 MiB
// buffered, and one object of a few hundred MB (the read models' after a
// sold-out block) was never stored whole (docs/snapshots.md).
const PartBytesMax = 16 << 20

// prefetch is how many parts a reader fetches ahead of the one
// being decoded: the next parts download while the decoder works.
const prefetch = 3

// Metadata keys of a manifest object: manifestKey marks it, its value
// the manifest's layout version, and macKey holds its MAC.
const (
	manifestKey     = "tresor-manifest"
	manifestVersion = "1"
	macKey          = "tresor-hmac"
)

// manifestData names a snapshot's parts: the snapshot is complete and
// trusted only as its manifest says, and the manifest is written last.
type manifestData struct {
	Meta
	// ID is random, drawn for each snapshot: part MACs cover it, so that a
	// part of another snapshot (even one at the same sequence) is refused.
	ID    string `json:"id"`
	Parts []part `json:"parts"`
	// Sections holds the index of the first part of each section after
	// the first, in order (PartWriter.Cut): LoadSections hands the first
	// to its reader and the others to be opened alone, later. A snapshot
	// without sections is one section.
	Sections []int `json:"sections,omitempty"`
}

// part is one part's size and MAC.
type part struct {
	Bytes int    `json:"bytes"`
	MAC   string `json:"mac"`
}

// partName names part i of the snapshot whose manifest is name: parts sort
// after their manifest's sequence and are listed apart from manifests.
func partName(manifest, id string, i int) string {
	return fmt.Sprintf("part.%s.%s.%06d", manifest, id, i)
}

// manifestMAC authenticates a manifest under its name.
func (b *Bucket) manifestMAC(name string, manifest []byte) string {
	h := hmac.New(sha256.New, b.cfg.Key)
	h.Write([]byte("tresor/snapshot-manifest\x00" + name + "\x00"))
	h.Write(manifest)
	return hex.EncodeToString(h.Sum(nil))
}

// partMAC authenticates part i of the snapshot named manifest with id: a
// part moved to another index or snapshot fails it.
func (b *Bucket) partMAC(manifest, id string, i int, data []byte) string {
	h := hmac.New(sha256.New, b.cfg.Key)
	h.Write([]byte("tresor/snapshot-part\x00" + manifest + "\x00" + id + "\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(i)))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// PartWriter stores what is written to it as parts of at most max bytes,
// for Slot.SaveParts' write.
type PartWriter struct {
	// ctx bounds the requests to the server; cut, the caller's context,
	// cuts the bytes short (see putParts).
	ctx, cut context.Context
	b        *Bucket
	manifest manifestData
	name     string
	buf      []byte
	max      int
	// pace holds the bytes to the slot's pace (Pace).
	pace limiter
}

func (w *PartWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), w.max-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == w.max {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// flush stores the buffered bytes as the next part and waits for the
// server to acknowledge it before more are sent.
func (w *PartWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.put(w.buf)
	w.buf = w.buf[:0]
	return err
}

// writeWhole stores data, held whole by the caller until it returns, as
// parts taken from it in place: a snapshot of 10 MB is not copied into a
// buffer grown to its size (allocations that bring a garbage collection
// forward, under the writer's commands).
func (w *PartWriter) writeWhole(data []byte) error {
	if err := w.flush(); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), w.max)
		if err := w.put(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// put stores data as the next part and waits for the server to
// acknowledge it.
func (w *PartWriter) put(data []byte) error {
	i := len(w.manifest.Parts)
	name := partName(w.name, w.manifest.ID, i)
	meta := jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(w.b.cfg.ChunkBytes)}}
	if _, err := w.b.os.Put(w.ctx, meta, &pacedReader{ctx: w.cut, pace: &w.pace, data: data}); err != nil {
		return fmt.Errorf("put snapshot part %s: %w", name, err)
	}
	w.manifest.Parts = append(w.manifest.Parts, part{Bytes: len(data), MAC: w.b.partMAC(w.name, w.manifest.ID, i, data)})
	w.manifest.Bytes += len(data)
	return nil
}

// Cut ends a section: what is written next begins a new part and can be
// read alone, authenticated by the manifest, with Sections.Open.
func (w *PartWriter) Cut() error {
	if err := w.flush(); err != nil {
		return err
	}
	w.manifest.Sections = append(w.manifest.Sections, len(w.manifest.Parts))
	return nil
}

// putParts stores what write writes as a snapshot described by meta, at
// rate bytes a second (0: as fast as the server takes them): parts
// of at most Config.PartBytes stored as write goes (so that write
// can stream its encoding without holding it whole), then a manifest naming
// them, written last; then it deletes the oldest snapshots beyond Keep.
//
// A cancel of ctx cuts the store short at its next chunk: no more bytes
// are sent, the chunks of the part being sent are purged, and no manifest
// is written. The requests to the server keep ctx's deadline (and
// purgeGrace more) but not its cancel: the Object Store purges a
// part cut short with its Put's context, and a cancelled one would leave
// its chunks in the bucket for ever, under no name that a prune lists.
func (b *Bucket) putParts(ctx context.Context, meta Meta, rate int, write func(*PartWriter) error) error {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("put snapshot: %w", err)
	}
	req, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if deadline, ok := ctx.Deadline(); ok {
		req, cancel = context.WithDeadline(req, deadline.Add(purgeGrace))
	}
	defer cancel()
	meta.Bytes = 0
	w := &PartWriter{ctx: req, cut: ctx, b: b, name: snapshotName(meta.Kind, meta.Chain, meta.Sequence),
		manifest: manifestData{Meta: meta, ID: hex.EncodeToString(id[:])}, max: b.cfg.PartBytes,
		pace: limiter{rate: rate}}
	err := write(w)
	if err == nil {
		err = w.flush()
	}
	if err == nil {
		err = ctx.Err()
	}
	var mb []byte
	if err == nil {
		mb, err = json.Marshal(&w.manifest)
	}
	if err == nil {
		om := jetstream.ObjectMeta{Name: w.name, Metadata: map[string]string{manifestKey: manifestVersion, macKey: b.manifestMAC(w.name, mb)}}
		if _, err = b.os.Put(req, om, bytes.NewReader(mb)); err != nil {
			err = fmt.Errorf("put snapshot manifest %s: %w", w.name, err)
		}
	}
	if err != nil {
		// The parts stored so far are orphans; a later prune deletes them
		// once older than every snapshot kept.
		return fmt.Errorf("put snapshot %s: %w", w.name, err)
	}
	return b.prune(req, meta.Kind, meta.Chain)
}

// purgeGrace is the time a store whose deadline has passed still
// has to purge the part it was sending.
const purgeGrace = 5 * time.Second

// prune deletes the oldest snapshots beyond Keep, and every part older
// than the oldest snapshot kept: those of the snapshots deleted and those
// a store cut short left without a manifest. Parts at or after it may be
// a store in progress.
func (b *Bucket) prune(ctx context.Context, kind, chain string) error {
	all, err := b.objectNames(ctx)
	if err != nil {
		return err
	}
	names := manifestNames(all, kind, chain)
	// The newest Keep that hold an object are kept: a name among them
	// may be one an older build or an operator deleted, its marker left.
	kept, oldest := 0, ""
	for i := len(names) - 1; i >= 0; i-- {
		if kept < b.cfg.Keep {
			_, err := b.os.GetInfo(ctx, names[i])
			if err == nil {
				kept, oldest = kept+1, names[i]
				continue
			}
			if !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("prune snapshots: %w", err)
			}
		}
		if err := b.remove(ctx, names[i]); err != nil {
			return fmt.Errorf("prune snapshot %s: %w", names[i], err)
		}
	}
	if oldest == "" {
		b.sweepChunks(ctx)
		return nil
	}
	prefix := "part." + kind + "." + chain + "."
	for _, name := range all {
		// A part's name begins with its manifest's, whose sequence is
		// zero-padded: names compare as sequences.
		if strings.HasPrefix(name, prefix) && name < "part."+oldest {
			if err := b.remove(ctx, name); err != nil {
				return fmt.Errorf("prune snapshot part %s: %w", name, err)
			}
		}
	}
	b.sweepChunks(ctx)
	return nil
}

// sweepChunks purges the chunks of objects that were never described and
// whose newest chunk is older than Config.OrphanChunkAge: a store
// cut short by a crash (kill -9) leaves the chunks it sent under a NUID
// that only the object's description would have named, so that no prune
// by name ever finds them. Each object described has at most one chunk
// subject, so the descriptions are read only when the chunk subjects
// outnumber them (after the prune above, every description left is an
// object's). A failure is logged: the snapshot is stored, and the next
// prune sweeps again.
func (b *Bucket) sweepChunks(ctx context.Context) {
	if err := b.sweep(ctx); err != nil {
		b.cfg.Logger.Warn("snapshot chunks not swept", "err", err)
	}
}

func (b *Bucket) sweep(ctx context.Context) error {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	info, err := b.stream.Info(rctx, jetstream.WithSubjectFilter(b.chunkPrefix+">"))
	if err != nil {
		return fmt.Errorf("list snapshot chunks: %w", err)
	}
	names, err := b.objectNames(ctx)
	if err != nil || len(info.State.Subjects) <= len(names) {
		return err
	}
	described := make(map[string]bool, len(names))
	for _, name := range names {
		oi, err := b.os.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			// Pruned meanwhile (the other kind's prune): its chunks with it.
		case err != nil:
			return fmt.Errorf("sweep snapshot chunks: %w", err)
		default:
			described[oi.NUID] = true
		}
	}
	for subj := range info.State.Subjects {
		if described[strings.TrimPrefix(subj, b.chunkPrefix)] {
			continue
		}
		if err := b.purgeOrphan(ctx, subj); err != nil {
			return err
		}
	}
	return nil
}

// purgeOrphan purges the chunks on subj if its newest is older than
// Config.OrphanChunkAge.
func (b *Bucket) purgeOrphan(ctx context.Context, subj string) error {
	ctx, cancel := b.reqCtx(ctx)
	defer cancel()
	last, err := b.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep snapshot chunks %s: %w", subj, err)
	}
	if time.Since(last.Time) < b.cfg.OrphanChunkAge {
		return nil
	}
	if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("purge snapshot chunks %s: %w", subj, err)
	}
	b.cfg.Logger.Info("snapshot chunks of a store cut short purged", "subject", subj, "newest", last.Time)
	return nil
}

// remove deletes the object name, then purges the delete marker the Object
// Store leaves on its subject: the bucket's subjects (objectNames) then
// name the snapshots kept and their parts only, as many whatever the
// history's length. A name whose object an older build deleted has its
// marker purged the same way.
func (b *Bucket) remove(ctx context.Context, name string) error {
	if err := b.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	ctx, cancel := b.reqCtx(ctx)
	defer cancel()
	if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.metaSubject(name))); err != nil {
		return fmt.Errorf("purge the delete marker of %s: %w", name, err)
	}
	return nil
}

// open authenticates the snapshot name's manifest and returns a reader of
// its first section's data that fetches the parts ahead and refuses, with
// an error wrapping ErrRefused, any part that fails its size or MAC, and
// the other sections. The caller closes the reader.
func (b *Bucket) open(ctx context.Context, name string) (Meta, io.ReadCloser, *Sections, error) {
	m, err := b.openManifest(ctx, name)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	secs := &Sections{b: b, name: name, m: m}
	return m.Meta, secs.open(ctx, -1), secs, nil
}

// openManifest reads and authenticates the manifest of the snapshot name:
// errGone when it holds no object, an error wrapping ErrRefused or
// ErrUnavailable when it cannot be read or trusted.
func (b *Bucket) openManifest(ctx context.Context, name string) (*manifestData, error) {
	info, err := b.info(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", errGone, name)
	}
	if err != nil {
		return nil, refused(err, "get snapshot %s", name)
	}
	return b.manifest(ctx, name, info)
}

// info reads the object info of the snapshot name within a request's time,
// as the manifest is read.
func (b *Bucket) info(ctx context.Context, name string) (*jetstream.ObjectInfo, error) {
	ctx, cancel := b.reqCtx(ctx)
	defer cancel()
	return b.os.GetInfo(ctx, name)
}

// getBytes reads the object name whole (getObject).
func (b *Bucket) getBytes(ctx context.Context, name string) ([]byte, error) {
	info, err := b.info(ctx, name)
	if err != nil {
		return nil, err
	}
	return b.getObject(ctx, info)
}

// getObject reads the object of info whole, through an ordered pull
// consumer on its chunks, and checks its size and digest as the Object
// Store's GetBytes does. GetBytes reads through a push consumer, whose
// messages never reach a read-only user in another account than the
// bucket's (eventstore.ReaderAccess): a backup reads the snapshots as
// such a user when serve runs, and serve's loads read them the same way.
func (b *Bucket) getObject(ctx context.Context, info *jetstream.ObjectInfo) ([]byte, error) {
	data := make([]byte, 0, info.Size)
	if info.Chunks > 0 {
		cons, err := b.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{b.chunkPrefix + info.NUID}, InactiveThreshold: objectReadIdle})
		if err != nil {
			return nil, err
		}
		for got := 0; got < int(info.Chunks); {
			batch, err := cons.Fetch(int(info.Chunks)-got, jetstream.FetchContext(ctx))
			if err != nil {
				return nil, err
			}
			for m := range batch.Messages() {
				data = append(data, m.Data()...)
				got++
			}
			if err := batch.Error(); err != nil {
				return nil, err
			}
		}
	}
	sum := sha256.Sum256(data)
	if uint64(len(data)) != info.Size || info.Digest != "SHA-256="+base64.URLEncoding.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("object %s: %d bytes read, %d described: %w", info.Name, len(data), info.Size, jetstream.ErrDigestMismatch)
	}
	return data, nil
}

// objectReadIdle is how long the server keeps an object's consumer once
// its reader stops asking: a reader may not delete it.
const objectReadIdle = 30 * time.Second

// manifest reads and authenticates the manifest of the snapshot name,
// whose object info is info; a manifest that fails is ErrRefused.
func (b *Bucket) manifest(ctx context.Context, name string, info *jetstream.ObjectInfo) (*manifestData, error) {
	_, m, err := b.manifestBytes(ctx, name, info)
	return m, err
}

// manifestBytes is manifest, with the manifest's bytes as stored.
func (b *Bucket) manifestBytes(ctx context.Context, name string, info *jetstream.ObjectInfo) ([]byte, *manifestData, error) {
	v, ok := info.Metadata[manifestKey]
	if !ok {
		// Builds before the manifests stored a snapshot as one object,
		// which no build reads any more: skipped like any other refused.
		return nil, nil, fmt.Errorf("%w: %s: not a manifest (a snapshot stored as one object by an older build)", ErrRefused, name)
	}
	if v != manifestVersion {
		return nil, nil, fmt.Errorf("%w: %s: manifest version %s, this build reads %s", ErrRefused, name, v, manifestVersion)
	}
	// A manifest is small: a read that does not end within a request's
	// time is a passing error, tried again, and not a wait as long as
	// the caller's.
	rctx, cancel := b.reqCtx(ctx)
	mb, err := b.getObject(rctx, info)
	cancel()
	if err != nil {
		return nil, nil, refused(err, "read %s", name)
	}
	m, err := b.checkManifest(name, mb, info.Metadata[macKey])
	return mb, m, err
}

// checkManifest authenticates the manifest mb of the snapshot name with
// its MAC and parses it; a manifest that fails is ErrRefused.
func (b *Bucket) checkManifest(name string, mb []byte, mac string) (*manifestData, error) {
	if !hmac.Equal([]byte(b.manifestMAC(name, mb)), []byte(mac)) {
		return nil, fmt.Errorf("%w: %s: manifest authentication fails (altered or written under another key)", ErrRefused, name)
	}
	var m manifestData
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: manifest: %w", ErrRefused, name, err)
	}
	prev := 0
	for _, start := range m.Sections {
		if start < prev || start > len(m.Parts) {
			return nil, fmt.Errorf("%w: %s: manifest: a section from part %d of %d", ErrRefused, name, start, len(m.Parts))
		}
		prev = start
	}
	return &m, nil
}

// Sections are the sections of a snapshot after its first
// (PartWriter.Cut), each to be read alone once LoadSections has
// authenticated the manifest that names their parts.
type Sections struct {
	b    *Bucket
	name string
	m    *manifestData
}

// Len is how many sections follow the first.
func (x *Sections) Len() int {
	if x.m == nil {
		return 0
	}
	return len(x.m.Sections)
}

// Open returns a reader of section i+1 (0 is the first after the one
// LoadSections read), which refuses with an error wrapping
// ErrRefused a part that is missing, altered or of another
// snapshot. The caller closes it.
func (x *Sections) Open(ctx context.Context, i int) (io.ReadCloser, error) {
	if i < 0 || i >= x.Len() {
		return nil, fmt.Errorf("%w: %s: section %d of %d", ErrRefused, x.name, i, x.Len())
	}
	return x.open(ctx, i), nil
}

// open reads the parts of section i+1, -1 being the first.
func (x *Sections) open(ctx context.Context, i int) io.ReadCloser {
	from, to := 0, len(x.m.Parts)
	if i >= 0 {
		from = x.m.Sections[i]
	}
	if i+1 < len(x.m.Sections) {
		to = x.m.Sections[i+1]
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan partResult, prefetch-1)
	go x.b.fetchParts(ctx, x.name, x.m, i+1, from, to, ch)
	return &partReader{parts: ch, cancel: cancel}
}

// partResult is one part fetched and checked, or why it is refused.
type partResult struct {
	data []byte
	err  error
}

// fetchParts fetches the manifest's parts from up to to in order, checks
// each and hands it on, until the last or ctx ends; then it logs the
// section's fetch (section 0 is the first).
func (b *Bucket) fetchParts(ctx context.Context, name string, m *manifestData, section, from, to int, out chan<- partResult) {
	defer close(out)
	started := time.Now()
	var fetching time.Duration
	bytes := 0
	for i := from; i < to; i++ {
		p := m.Parts[i]
		var res partResult
		pn := partName(name, m.ID, i)
		t := time.Now()
		res.data, res.err = b.getBytes(ctx, pn)
		fetching += time.Since(t)
		bytes += len(res.data)
		switch {
		case res.err != nil:
			res.err = refused(res.err, "%s: part %d of %d", name, i, len(m.Parts))
		case len(res.data) != p.Bytes:
			res.err = fmt.Errorf("%w: %s: part %d of %d holds %d bytes, the manifest says %d", ErrRefused, name, i, len(m.Parts), len(res.data), p.Bytes)
		case !hmac.Equal([]byte(b.partMAC(name, m.ID, i, res.data)), []byte(p.MAC)):
			res.err = fmt.Errorf("%w: %s: part %d of %d: authentication fails (altered, of another snapshot or written under another key)", ErrRefused, name, i, len(m.Parts))
		}
		select {
		case out <- res:
		case <-ctx.Done():
			return
		}
		if res.err != nil {
			return
		}
	}
	level := slog.LevelInfo
	if section > 0 {
		level = slog.LevelDebug
	}
	// fetch is the time spent getting the parts; in all, with the time
	// the reader took to take them (the prefetch is bounded).
	b.cfg.Logger.Log(ctx, level, "snapshot section fetched", "name", name, "section", section, "parts", to-from, "bytes", bytes,
		"fetch", round(fetching), "mb_per_s", mbPerSecond(bytes, fetching), "in_all", since(started))
}

// mbPerSecond is a rate for a log line, in MB (10^6 bytes) a second to
// one decimal.
func mbPerSecond(bytes int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(int64(float64(bytes)/1e5/d.Seconds())) / 10
}

// partReader reads the parts fetchParts hands on, in order.
type partReader struct {
	parts  <-chan partResult
	cur    []byte
	err    error
	cancel context.CancelFunc
}

func (r *partReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		res, ok := <-r.parts
		switch {
		case !ok:
			r.err = io.EOF
		case res.err != nil:
			r.err = res.err
		default:
			r.cur = res.data
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// Close stops the fetching of parts not read yet.
func (r *partReader) Close() error {
	r.cancel()
	return nil
}

// manifestNames lists the snapshots of a kind and chain among the objects
// names, oldest first: objects named kind.chain.<sequence>, not their
// parts.
func manifestNames(names []string, kind, chain string) []string {
	prefix := kind + "." + chain + "."
	var out []string
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if seq := strings.TrimPrefix(name, prefix); len(seq) == 20 {
			if _, err := strconv.ParseUint(seq, 10, 64); err == nil {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}
