package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrNameInUse reports a node name another process holds (ClaimName).
var ErrNameInUse = errors.New("eventstore: node name in use")

// claimLapseTTLs is how many TTLs ClaimName waits for a held name: a
// process that died without releasing it (kill -9) holds it for one TTL
// more, and a supervisor restarting it at once must not be refused.
const claimLapseTTLs = 2

// NameClaim keeps a node's name to one process at a time: a lease, in the
// lease bucket, on a key of its own for the name, held by this process
// (its instance) and renewed until Release. Two processes started with the
// same --node-name would both run, each a standby or the writer (the
// chain's lease is by revision, so never two writers), with the health
// and the logs of one node telling of two.
type NameClaim struct {
	name     string
	instance string
	lease    *Lease
	log      *slog.Logger
	stop     chan struct{}
	done     chan struct{}
	// renewed is when the claim was last written (Unix ns): Held.
	renewed atomic.Int64

	// taken is closed once another process holds the name; takenBy,
	// written before, says which.
	taken   chan struct{}
	takenBy string
}

// ClaimName claims name for instance (who this process is, as a refusal
// shows it to another) in the lease bucket on nc, and renews it until
// Release. A name held by another process is waited for claimLapseTTLs
// TTLs (a holder that died without releasing it), then refused with an
// error wrapping ErrNameInUse; a server that does not answer (a cluster
// without its quorum) is waited for as a stream is (OpenPatiently).
func ClaimName(ctx context.Context, nc *nats.Conn, name, instance string, cfg LeaseConfig) (*NameClaim, error) {
	cfg.Holder = instance
	sum := sha256.Sum256([]byte(name))
	// Names are free text (a host name and a pid by default): the key is
	// their hash.
	l, err := OpenLease(ctx, nc, "node-"+hex.EncodeToString(sum[:16]), cfg)
	if err != nil {
		return nil, err
	}
	var heldSince time.Time
	_, err = OpenPatiently(ctx, cfg.Logger, fmt.Sprintf("claim on the node name %q", name), func(ctx context.Context) (uint64, error) {
		term, err := l.Acquire(ctx)
		if !errors.Is(err, ErrLeaseHeld) {
			return term, err
		}
		if heldSince.IsZero() {
			heldSince = time.Now()
		} else if time.Since(heldSince) >= claimLapseTTLs*l.cfg.TTL {
			// Released or lapsed since the try, or not read: try again.
			if held, err := l.Info(ctx); err == nil && held.Holder != "" {
				return 0, finalError{fmt.Errorf("node name %q is held by another process (%s): %w", name, held.Holder, ErrNameInUse)}
			}
		}
		return 0, err
	})
	if errors.Is(err, ErrNameInUse) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("claim node name %q: %w", name, err)
	}
	c := &NameClaim{name: name, instance: instance, lease: l, log: cfg.Logger,
		stop: make(chan struct{}), done: make(chan struct{}), taken: make(chan struct{})}
	c.renewed.Store(time.Now().UnixNano())
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.renew()
	return c, nil
}

// claimRenewParts is how many renewals a claim gets per TTL: one missed
// (a slow answer) leaves it held. The writer's lease is renewed every
// quarter TTL in the same bucket; the claims of three nodes add 4.5
// writes a second to it at the default TTL.
const claimRenewParts = 3

// renew renews the claim until Release. A claim that lapsed (this process
// was cut off from NATS for longer than the TTL: a pause, a lost quorum)
// is claimed again, with a warning, when the name is still free; when
// another process holds it by then, the claim is taken (Taken), and renew
// stops.
func (c *NameClaim) renew() {
	defer close(c.done)
	t := time.NewTicker(c.lease.cfg.TTL / claimRenewParts)
	defer t.Stop()
	lapsed := false
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		// Each call is bounded by the lease's request timeout.
		ctx := context.Background()
		sent := time.Now().UnixNano()
		if !lapsed {
			err := c.lease.Renew(ctx)
			if err == nil {
				c.renewed.Store(sent)
			}
			if !errors.Is(err, ErrLeaseLost) {
				continue // renewed, or no answer: tried again next tick
			}
			lapsed = true
		}
		_, err := c.lease.Acquire(ctx)
		switch {
		case err == nil:
			c.renewed.Store(sent)
			lapsed = false
			c.log.Warn("node name claimed again: its claim had lapsed while this process could not reach NATS", "node", c.name)
		case errors.Is(err, ErrLeaseHeld):
			if held, err := c.lease.Info(ctx); err == nil && held.Holder != "" && held.Holder != c.instance {
				c.takenBy = held.Holder
				close(c.taken)
				return
			}
		}
	}
}

// Held reports whether the claim is surely this process's now: written
// less than a TTL ago. A process cut off from NATS (frozen, its cluster
// without quorum) has let it lapse, and until it has claimed it again or
// found it taken another process may be running under the name.
func (c *NameClaim) Held() bool {
	return time.Since(time.Unix(0, c.renewed.Load())) < c.lease.cfg.TTL
}

// Taken is closed when another process has claimed the name after this
// one's claim lapsed: two processes then run as one node, and this one,
// the one cut off, should stop.
func (c *NameClaim) Taken() <-chan struct{} { return c.taken }

// Err says who took the name once Taken is closed, nil before.
func (c *NameClaim) Err() error {
	select {
	case <-c.taken:
		return fmt.Errorf("node name %q claimed by another process (%s) while this one could not reach NATS: %w", c.name, c.takenBy, ErrNameInUse)
	default:
		return nil
	}
}

// Release stops renewing and gives the name up at once, so that a
// successor (a restart) claims it without waiting.
func (c *NameClaim) Release(ctx context.Context) error {
	close(c.stop)
	<-c.done
	if err := c.lease.Release(ctx); err != nil {
		return fmt.Errorf("release node name %q: %w", c.name, err)
	}
	return nil
}
