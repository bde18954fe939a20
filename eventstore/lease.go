package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaseBucket is the JetStream KV bucket of the writers' leases, one key
// per chain, and of the nodes' names (ClaimName), one key per name.
const LeaseBucket = "TRESOR_LEASES"

// Lease errors.
var (
	// ErrLeaseHeld reports an Acquire while another node holds the lease.
	ErrLeaseHeld = errors.New("eventstore: lease held by another node")
	// ErrLeaseLost reports a Renew that found the lease expired or taken
	// over: the holder must stop writing at once (the chain's fencing
	// refuses its appends anyway).
	ErrLeaseLost = errors.New("eventstore: lease lost")
)

// LeaseConfig configures a chain's writer lease. Zero fields take the
// defaults.
type LeaseConfig struct {
	// Holder names this node in the lease (required): health and logs show
	// who writes.
	Holder string
	// TTL is how long a lease lives without renewal (default 2s): the bound
	// on a takeover after a writer dies. It is the bucket's max age, so the
	// server expires the key and tells the standbys' watches.
	TTL time.Duration
	// Replicas is the bucket's replica count, as the stream's (default 1).
	Replicas int
	// RequestTimeout bounds each call to the server (default TTL/4: a
	// renewal that hangs longer would no longer be well inside the TTL).
	RequestTimeout time.Duration
	// Logger logs the tries at opening the bucket while the server cannot
	// answer yet (nil: none).
	Logger *slog.Logger
}

func (c *LeaseConfig) setDefaults() error {
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = c.TTL / 4
	}
	switch {
	case c.Holder == "":
		return fmt.Errorf("lease: no holder name: %w", ErrInvalid)
	case c.TTL < time.Second:
		// The server's own limit for a bucket's max age with markers.
		return fmt.Errorf("lease TTL %s: want at least 1s: %w", c.TTL, ErrInvalid)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("lease replicas %d: want 1..5: %w", c.Replicas, ErrInvalid)
	case c.RequestTimeout <= 0 || c.RequestTimeout >= c.TTL:
		return fmt.Errorf("lease request timeout %s: want more than 0 and less than the TTL %s: %w", c.RequestTimeout, c.TTL, ErrInvalid)
	}
	return nil
}

// LeaseInfo is the lease as stored: who holds it and since which term.
type LeaseInfo struct {
	// Holder is the node holding the lease ("" when nobody does).
	Holder string `json:"holder"`
	// Term is the KV revision of the acquisition that won: it grows with
	// every new holder, so a larger term is a later writer.
	Term uint64 `json:"term"`
}

// LeaseRead is the lease as read from the server, with the revision of its
// key: a holder's every renewal writes a new one, so a standby that reads
// the same revision again and again reads a copy that nobody renews (a
// replica answers reads without its cluster's quorum, as of before it was
// lost), and one that reads an older revision than it has seen reads a
// copy behind another. Revision is 0 when the key is absent.
type LeaseRead struct {
	LeaseInfo
	Revision uint64
}

// Lease is one node's handle on the writer lease of a chain, kept in the
// KV bucket LeaseBucket. Acquire creates the key (compare-and-set on its
// absence); Renew updates it on the revision last written (compare-and-set
// again), so a holder that was expired and replaced learns it on its next
// renewal. The chain's expected-sequence fencing stays the safety net for
// the window between a lost lease and its holder noticing. Safe for
// concurrent use.
type Lease struct {
	cfg   LeaseConfig
	chain string
	kv    jetstream.KeyValue

	mu  sync.Mutex
	rev uint64 // revision last written by this holder; 0 when not held
	// term is the revision of the acquisition this holder won.
	term uint64
	// renewed is when the last successful write was sent: the lease is
	// surely still ours until renewed+TTL.
	renewed time.Time
}

// OpenLease creates or opens the lease bucket on nc and returns this node's
// handle on chain's lease. It returns an error wrapping ErrInvalid for a bad
// configuration, or the server's.
func OpenLease(ctx context.Context, nc *nats.Conn, chain string, cfg LeaseConfig) (*Lease, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if !validName(chain, NameLenMax, false) {
		return nil, fmt.Errorf("lease of chain %q: %w", chain, ErrInvalid)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.RequestTimeout))
	if err != nil {
		return nil, fmt.Errorf("open lease: jetstream: %w", err)
	}
	// Creating the bucket may wait for a meta leader, and several nodes
	// starting at once race to create it: look it up, create it when
	// missing, and try again until one of them has.
	kv, err := OpenPatiently(ctx, cfg.Logger, "lease bucket "+LeaseBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return openLeaseBucket(ctx, js, cfg)
	})
	if err != nil {
		return nil, fmt.Errorf("open lease bucket %s: %w", LeaseBucket, err)
	}
	return &Lease{cfg: cfg, chain: chain, kv: kv}, nil
}

// openLeaseBucket opens the lease bucket, creating it when missing.
func openLeaseBucket(ctx context.Context, js jetstream.JetStream, cfg LeaseConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	return js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "Tresor writer leases (one key per chain) and node-name claims (one key per name)",
		History:     1,
		TTL:         cfg.TTL,
		// Markers on expiry wake the standbys' watches at once.
		LimitMarkerTTL: cfg.TTL,
		Storage:        jetstream.FileStorage,
		Replicas:       cfg.Replicas,
	})
}

// Holder is the name this handle acquires the lease under.
func (l *Lease) Holder() string { return l.cfg.Holder }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Acquire takes the lease if nobody holds it and returns its term. It
// returns ErrLeaseHeld when another node (or this one, through another
// handle) holds it, or the server's error.
func (l *Lease) Acquire(ctx context.Context) (uint64, error) {
	return l.acquire(ctx, 0)
}

// TakeOver takes a lease its holder abandoned: held under revision rev,
// which the caller has not seen renewed for a TTL (its holder stopped
// writing by then, see Valid), while the bucket still shows it: a bucket
// whose leader was lost expires it only once a new leader gets to it. The
// write is conditional on rev: a renewal the caller did not see makes it
// ErrLeaseHeld.
func (l *Lease) TakeOver(ctx context.Context, rev uint64) (uint64, error) {
	return l.acquire(ctx, rev)
}

// acquire writes this handle's lease, created (over nothing, or over a
// release or expiry marker) when rev is 0, else over revision rev.
func (l *Lease) acquire(ctx context.Context, rev uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	value, _ := json.Marshal(LeaseInfo{Holder: l.cfg.Holder})
	var err error
	if rev == 0 {
		rev, err = l.kv.Create(ctx, l.chain, value)
	} else {
		rev, err = l.kv.Update(ctx, l.chain, value, rev)
	}
	var apiErr *jetstream.APIError
	// A create over a release or expiry marker is an update on the marker's
	// revision, which another node may have won first: wrong last sequence.
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)) {
		return 0, fmt.Errorf("acquire lease of chain %s: %w", l.chain, ErrLeaseHeld)
	}
	if err != nil {
		return 0, fmt.Errorf("acquire lease of chain %s: %w", l.chain, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev, l.term, l.renewed = rev, rev, sent
	return rev, nil
}

// Renew extends a held lease by its TTL. It returns ErrLeaseLost when the
// lease expired or another node took it (the handle then holds nothing),
// or the server's error (the lease may still be ours: retry while
// Valid).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	rev, term := l.rev, l.term
	l.mu.Unlock()
	if rev == 0 {
		return fmt.Errorf("renew lease of chain %s: not held: %w", l.chain, ErrLeaseLost)
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	value, _ := json.Marshal(LeaseInfo{Holder: l.cfg.Holder, Term: term})
	next, err := l.kv.Update(ctx, l.chain, value, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// A renewal that timed out may have been written all the same: the
		// key then holds this handle's own value under a newer revision.
		if own, ok := l.ownRevision(ctx, term); ok {
			next, err = l.kv.Update(ctx, l.chain, value, own)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		l.rev, l.term = 0, 0
		return fmt.Errorf("renew lease of chain %s (term %d): %w", l.chain, term, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("renew lease of chain %s (term %d): %w", l.chain, term, err)
	}
	l.rev, l.renewed = next, sent
	return nil
}

// Valid reports whether this handle surely holds the lease now: it won or
// renewed it less than TTL minus RequestTimeout ago, measured from when the
// write was sent (a slow answer never stretches it). The margin makes a
// holder that checks Valid at least every RequestTimeout stop writing
// before the server lets another node acquire.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev != 0 && time.Since(l.renewed) < l.cfg.TTL-l.cfg.RequestTimeout
}

// Term returns the term this handle holds, 0 when it holds none.
func (l *Lease) Term() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// Release gives a held lease up at once, so that a standby takes over
// without waiting for the TTL. The delete is conditional on the revision
// this holder wrote last: it never removes another holder's lease. Releasing
// a lease not held does nothing.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	rev, term := l.rev, l.term
	l.rev, l.term = 0, 0
	l.mu.Unlock()
	if rev == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	err := l.kv.Delete(ctx, l.chain, jetstream.LastRevision(rev))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		if own, ok := l.ownRevision(ctx, term); ok {
			err = l.kv.Delete(ctx, l.chain, jetstream.LastRevision(own))
		}
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("release lease of chain %s: %w", l.chain, err)
	}
	return nil
}

// ownRevision reads the lease and returns its revision when it still holds
// this handle's holder and term: no other node writes that pair, and the
// bucket keeps one revision per key, so nobody has held the lease since.
func (l *Lease) ownRevision(ctx context.Context, term uint64) (uint64, bool) {
	r, err := l.Read(ctx)
	if err != nil || r.Revision == 0 {
		return 0, false
	}
	return r.Revision, r.LeaseInfo == LeaseInfo{Holder: l.cfg.Holder, Term: term}
}

// Info returns the lease as stored: its holder and term, or a zero
// LeaseInfo when nobody holds it.
func (l *Lease) Info(ctx context.Context) (LeaseInfo, error) {
	r, err := l.Read(ctx)
	return r.LeaseInfo, err
}

// Read is Info with the revision of the lease's key as read.
func (l *Lease) Read(ctx context.Context) (LeaseRead, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	e, err := l.kv.Get(ctx, l.chain)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return LeaseRead{}, nil
	}
	if err != nil {
		return LeaseRead{}, fmt.Errorf("read lease of chain %s: %w", l.chain, err)
	}
	info, err := decodeLease(e)
	return LeaseRead{LeaseInfo: info, Revision: e.Revision()}, err
}

// Revision returns the revision this handle last wrote (its acquisition
// or its last renewal), 0 when it holds nothing.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// decodeLease reads a stored lease; the term of a fresh acquisition is its
// own revision.
func decodeLease(e jetstream.KeyValueEntry) (LeaseInfo, error) {
	var info LeaseInfo
	if err := json.Unmarshal(e.Value(), &info); err != nil {
		return LeaseInfo{}, fmt.Errorf("lease of %s at revision %d: %w", e.Key(), e.Revision(), err)
	}
	if info.Term == 0 {
		info.Term = e.Revision()
	}
	return info, nil
}

// Watch sends on the returned channel the lease as it changes (a zero
// LeaseInfo when released or expired, with the marker's revision),
// starting with its current state, until ctx ends; the channel then
// closes. A standby tries to acquire as soon as it sees a zero holder.
// Changes are coalesced: a slow reader sees the latest. It returns the
// server's error when the watch cannot start.
func (l *Lease) Watch(ctx context.Context) (<-chan LeaseRead, error) {
	w, err := l.kv.Watch(ctx, l.chain)
	if err != nil {
		return nil, fmt.Errorf("watch lease of chain %s: %w", l.chain, err)
	}
	out := make(chan LeaseRead, 1)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the end of the initial values
				}
				var info LeaseInfo
				if e.Operation() == jetstream.KeyValuePut {
					if info, err = decodeLease(e); err != nil {
						continue
					}
				}
				// Keep only the latest: drop an unread older state.
				select {
				case <-out:
				default:
				}
				out <- LeaseRead{LeaseInfo: info, Revision: e.Revision()}
			}
		}
	}()
	return out, nil
}
