package eventstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DataKeysBucket is the KV bucket of the wrapped data keys that seal
// personal fields (docs/privacy.md). Its stream is made here rather than by
// the KV API, which denies deletes: erasing a key must overwrite its bytes
// on disk (a secure delete), where a KV purge only hides them.
const DataKeysBucket = "TRESOR_DATA_KEYS"

// dataKeysHistory keeps a key's previous wrapping while a master key
// rotation replaces it, so that a reader never finds none; Erase
// overwrites both.
const dataKeysHistory = 2

// ErrKeyNotFound and ErrKeyExists are DataKeys's answers for a name it
// does not hold, and for a Create of one it holds; ErrKeyChanged for an
// Update of an entry since changed; ErrNoDataKeys says that there is no
// data keys bucket beside the stream.
var (
	ErrKeyNotFound = errors.New("data key entry not found")
	ErrKeyExists   = errors.New("data key entry exists")
	ErrKeyChanged  = errors.New("data key entry changed or erased since it was read")
	ErrNoDataKeys  = errors.New("no data keys bucket " + DataKeysBucket)
)

// DataKeys is the KV store of wrapped data keys of one stream: every name
// is prefixed with the stream's, so that two ledgers on one cluster keep
// their keys apart.
type DataKeys struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
	prefix string
}

// dataKeysStream is the name of the bucket's stream.
const dataKeysStream = "KV_" + DataKeysBucket

// OpenDataKeys opens (creating it if needed) the data keys' bucket.
func (s *NATSStore) OpenDataKeys(ctx context.Context) (*DataKeys, error) {
	cfg := jetstream.StreamConfig{
		Name:              dataKeysStream,
		Description:       "Tresor: personal data keys, wrapped by the master key; erasing one erases a person's fields",
		Subjects:          []string{"$KV." + DataKeysBucket + ".>"},
		MaxMsgsPerSubject: dataKeysHistory,
		Discard:           jetstream.DiscardNew,
		Storage:           jetstream.FileStorage,
		Replicas:          s.cfg.Replicas,
		AllowRollup:       true,
		// Every read goes to the stream's leader: a direct get may be
		// answered by a replica behind it, and a key erased or rewrapped
		// must never be read, nor a revision of it missed, from one. The
		// keyring caches what it reads, so the leader answers few.
		AllowDirect: false,
		MaxMsgs:     -1, MaxBytes: -1, MaxAge: 0,
	}
	st, err := OpenPatiently(ctx, s.cfg.Logger, "bucket "+DataKeysBucket, func(ctx context.Context) (jetstream.Stream, error) {
		return s.js.CreateOrUpdateStream(ctx, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("open data keys bucket: %w", err)
	}
	return s.bindDataKeys(ctx, st)
}

// BindDataKeys opens the data keys' bucket as it is, changing nothing of
// its configuration (its replicas stay the cluster's), or answers
// ErrNoDataKeys when there is none.
func (s *NATSStore) BindDataKeys(ctx context.Context) (*DataKeys, error) {
	st, err := s.js.Stream(ctx, dataKeysStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoDataKeys
	}
	if err != nil {
		return nil, fmt.Errorf("look up data keys bucket: %w", err)
	}
	return s.bindDataKeys(ctx, st)
}

func (s *NATSStore) bindDataKeys(ctx context.Context, st jetstream.Stream) (*DataKeys, error) {
	kv, err := s.js.KeyValue(ctx, DataKeysBucket)
	if err != nil {
		return nil, fmt.Errorf("bind data keys bucket: %w", err)
	}
	return &DataKeys{kv: kv, stream: st, prefix: s.cfg.Stream + "."}, nil
}

// DataKeyEntry is one entry of the data keys' bucket as stored: its name
// without the stream's prefix, and its value (a wrapped key, or the
// entry naming a person's key).
type DataKeyEntry struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// kvOperationHeader marks a KV delete or purge (the KV API's own name,
// which it does not export).
const kvOperationHeader = "KV-Operation"

// dataKeysReadIdle is how long the server keeps ReadDataKeys's consumer
// once its reader stops asking: a read-only user may not delete it.
const dataKeysReadIdle = 30 * time.Second

// ReadDataKeys reads every entry of this stream's data keys, as they stand
// now, sorted by name, creating and changing nothing but a consumer: the
// newest value of each name, through a pull consumer, which answers across
// an account boundary (the embedded server's keeper) where the KV API's
// push consumers do not. It answers ErrNoDataKeys when there is no bucket.
// A user that may not read the bucket (a regulator's) is refused by the
// server, which tells the connection's error handler, not this call: the
// caller cancels ctx on hearing it.
func (s *NATSStore) ReadDataKeys(ctx context.Context) ([]DataKeyEntry, error) {
	st, err := s.js.Stream(ctx, dataKeysStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoDataKeys
	}
	if err != nil {
		return nil, fmt.Errorf("look up data keys bucket: %w", err)
	}
	prefix := "$KV." + DataKeysBucket + "." + s.cfg.Stream + "."
	// One consumer for the whole read (an ordered consumer makes a new one
	// at every fetch); the server drops it once idle.
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: prefix + ">",
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: dataKeysReadIdle, MemoryStorage: true, Replicas: 1})
	if err != nil {
		return nil, fmt.Errorf("read data keys bucket: %w", err)
	}
	values := map[string][]byte{}
	// The pending count bounds the read: each name's newest value, and
	// any written while it runs (a newer value replaces the older).
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, uint64(s.cfg.ReadBatchMax))), jetstream.FetchMaxWait(s.cfg.RequestTimeout))
		if err != nil {
			return nil, fmt.Errorf("read data keys bucket: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read data keys bucket: %w", err)
			}
			pending = meta.NumPending
			name := strings.TrimPrefix(m.Subject(), prefix)
			if m.Headers().Get(kvOperationHeader) != "" {
				delete(values, name) // a KV delete or purge marker
				continue
			}
			values[name] = m.Data()
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read data keys bucket: %w", err)
		}
		if got == 0 {
			// Not a silent partial read: the caller says the backup
			// carries no new data keys, and why.
			return nil, fmt.Errorf("read data keys bucket: %d entries pending, none came within %s", pending, s.cfg.RequestTimeout)
		}
	}
	out := make([]DataKeyEntry, 0, len(values))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		out = append(out, DataKeyEntry{Name: name, Value: values[name]})
	}
	return out, nil
}

// Get returns the value stored at name and its revision, or
// ErrKeyNotFound.
func (d *DataKeys) Get(ctx context.Context, name string) ([]byte, uint64, error) {
	e, err := d.kv.Get(ctx, d.prefix+name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrKeyNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read data key entry %s: %w", name, err)
	}
	return e.Value(), e.Revision(), nil
}

// Create stores value at name unless it is there already (ErrKeyExists).
func (d *DataKeys) Create(ctx context.Context, name string, value []byte) error {
	_, err := d.kv.Create(ctx, d.prefix+name, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return ErrKeyExists
	}
	if err != nil {
		return fmt.Errorf("create data key entry %s: %w", name, err)
	}
	return nil
}

// Update stores value at name if rev is still its newest revision, or
// answers ErrKeyChanged when it changed or was erased since: a rewrap
// never brings back a key erased meanwhile. It then overwrites the value
// it replaces on disk, so that a key wrapped under a retired master key
// does not linger.
func (d *DataKeys) Update(ctx context.Context, name string, value []byte, rev uint64) error {
	next, err := d.kv.Update(ctx, d.prefix+name, value, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return ErrKeyChanged
	}
	if err != nil {
		return fmt.Errorf("store data key entry %s: %w", name, err)
	}
	return d.erase(ctx, name, next)
}

// Erase overwrites every revision of name on disk (a secure delete), or
// answers ErrKeyNotFound when there is none.
func (d *DataKeys) Erase(ctx context.Context, name string) error {
	return d.erase(ctx, name, 0)
}

// erase overwrites the revisions of name before keep (every one for 0).
func (d *DataKeys) erase(ctx context.Context, name string, keep uint64) error {
	revs, err := d.revisions(ctx, name)
	if err != nil {
		return fmt.Errorf("read data key entry %s: %w", name, err)
	}
	if len(revs) == 0 {
		return ErrKeyNotFound
	}
	for _, rev := range revs {
		if keep != 0 && rev >= keep {
			continue
		}
		if err := d.eraseRevision(ctx, rev); err != nil {
			return fmt.Errorf("erase data key entry %s: %w", name, err)
		}
	}
	return nil
}

// revisions lists the stored revisions of name, oldest first, asking the
// stream for each next message on its subject. A KV history would not do:
// its watcher waits for as many messages as were there when it started,
// for ever if another process erases the last of them meanwhile (two
// approvals of one erasure, two nodes rewrapping a key).
func (d *DataKeys) revisions(ctx context.Context, name string) ([]uint64, error) {
	subject := d.subject(name)
	var revs []uint64
	for seq := uint64(1); ; {
		m, err := d.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return revs, nil
		}
		if err != nil {
			return nil, err
		}
		revs = append(revs, m.Sequence)
		seq = m.Sequence + 1
	}
}

// subject is the bucket's subject of name.
func (d *DataKeys) subject(name string) string {
	return "$KV." + DataKeysBucket + "." + d.prefix + name
}

// eraseRevision overwrites one stored revision. Another node rewrapping or
// erasing the same key may have overwritten it between our reading of the
// history and now: a revision already gone is what was asked. The server
// answers that case with a generic deletion failure, so the revision is
// looked up rather than the answer's text trusted.
func (d *DataKeys) eraseRevision(ctx context.Context, seq uint64) error {
	err := d.stream.SecureDeleteMsg(ctx, seq)
	if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if _, gerr := d.stream.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}

// Names lists the names the bucket holds (of this stream), from the
// stream's subjects rather than a KV listing, whose watcher could wait for
// ever on an entry erased meanwhile (see revisions).
func (d *DataKeys) Names(ctx context.Context) ([]string, error) {
	info, err := d.stream.Info(ctx, jetstream.WithSubjectFilter(d.subject(">")))
	if err != nil {
		return nil, fmt.Errorf("list data key entries: %w", err)
	}
	prefix := d.subject("")
	out := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		out = append(out, strings.TrimPrefix(subject, prefix))
	}
	slices.Sort(out)
	return out, nil
}
