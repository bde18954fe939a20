package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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
	name  string
	lease *Lease
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
}

// ClaimName claims name for instance (who this process is, as a refusal
// shows it to another) in the lease bucket on nc, waiting claimLapseTTLs
// TTLs for a holder that died without releasing it, and renews it until
// Release. It returns an error wrapping ErrNameInUse when another process
// holds it, or the server's.
func ClaimName(ctx context.Context, nc *nats.Conn, name, instance string, cfg LeaseConfig) (*NameClaim, error) {
	cfg.Holder = instance
	sum := sha256.Sum256([]byte(name))
	// Names are free text (a host name and a pid by default): the key is
	// their hash.
	l, err := OpenLease(ctx, nc, "node-"+hex.EncodeToString(sum[:16]), cfg)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(claimLapseTTLs * l.cfg.TTL)
	for {
		_, err := l.Acquire(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLeaseHeld) {
			return nil, fmt.Errorf("claim node name %q: %w", name, err)
		}
		if time.Now().After(deadline) {
			held, err := l.Info(ctx)
			if err != nil {
				return nil, fmt.Errorf("claim node name %q: %w", name, err)
			}
			return nil, fmt.Errorf("node name %q is held by another process (%s): %w", name, held.Holder, ErrNameInUse)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.cfg.TTL / 4):
		}
	}
	c := &NameClaim{name: name, lease: l, log: cfg.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.renew()
	return c, nil
}

// renew renews the claim every quarter TTL until Release. A claim lost (not
// renewed in time: this process was cut off from NATS, and another may
// have claimed the name since) is logged once, and claimed again when free.
func (c *NameClaim) renew() {
	defer close(c.done)
	t := time.NewTicker(c.lease.cfg.TTL / 4)
	defer t.Stop()
	lost := false
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		// Each call is bounded by the lease's request timeout.
		ctx := context.Background()
		if lost {
			if _, err := c.lease.Acquire(ctx); err == nil {
				lost = false
				c.log.Info("node name claimed again", "node", c.name)
			}
			continue
		}
		if err := c.lease.Renew(ctx); errors.Is(err, ErrLeaseLost) {
			lost = true
			c.log.Error("node name claim lost: another process may be running as this node", "node", c.name)
		}
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
