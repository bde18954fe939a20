package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Role is what a node does for its chain.
type Role string

// Roles: the writer holds the lease and decides; a standby follows the
// stream and forwards commands to the writer.
const (
	RoleStandby Role = "standby"
	RoleWriter  Role = "writer"
)

// retryPause is how long a node waits before trying again after a failed
// open or a lost watch.
const retryPause = 250 * time.Millisecond

// startReadMax bounds a writer's start reads on the cluster (see
// eventstore.CommitterConfig.StartReadMax): each is one message or the
// stream's state, answered in milliseconds by a leader.
const startReadMax = time.Second

// openWriterTTLs bounds, in lease TTLs, how long a node that won the lease
// tries to open its writer before it steps down and releases the lease.
const openWriterTTLs = 3

// NodeConfig configures a Node.
type NodeConfig struct {
	// Store is the event store on the NATS cluster; the node's lease,
	// forwarding and micro service use its connection.
	Store *eventstore.NATSStore
	// Lease is this node's handle on the chain's writer lease.
	Lease *eventstore.Lease
	// Writer configures the settlement writer the node opens when it takes
	// the lease (Start is set by the node).
	Writer settlement.Config
	// Committer configures the writer's group commit.
	Committer eventstore.CommitterConfig
	Logger    *slog.Logger
}

// Status is a node's place in the cluster, for health and metrics.
type Status struct {
	Role Role `json:"role"`
	// Holder and Term are the lease as this node last saw it.
	Holder string `json:"lease_holder"`
	Term   uint64 `json:"term"`
	// FollowerSeq is where the standby's state is; StandbyLag how many
	// sequences it is behind the stream's head as last read (0 on the
	// writer, whose state is the head).
	FollowerSeq uint64 `json:"follower_seq"`
	StandbyLag  uint64 `json:"standby_lag"`
	// Takeovers counts the times this node became the writer.
	Takeovers uint64 `json:"takeovers"`
}

// Node is one tresor serve process on a NATS cluster: a standby that keeps
// a ledger current by following the stream and forwards commands to the
// writer, until it wins the lease; then the writer, serving commands
// locally and, through a micro service, for every other node; back to
// standby when it loses the lease or its writer is fenced. It implements
// api.Writer.
type Node struct {
	cfg NodeConfig
	fwd *Forwarder

	mu       sync.Mutex
	writer   *settlement.Writer
	follower *follower
	// kept is the standby's ledger that a writer's open failed before
	// touching it (the stream's head could not be read): the next try
	// starts from it rather than from a fresh follower's, which holds
	// far less.
	kept *settlement.Start
	// term is the term of the lease this node leads under, 0 while it
	// does not: the writer's status names itself and its term from it,
	// whatever lease it has read.
	term  uint64
	lease eventstore.LeaseInfo
	// openErr is why the writer's last open failed while this node leads
	// (term set), nil otherwise.
	openErr error
	// leaseRev is the newest revision of the lease's key this node has
	// read or written (a read of an older or the same revision is a copy
	// nobody renews, or one behind: noteLease), and leaseSeen when it last
	// saw the key written: a revision newer than one it had, or its own
	// write; zero before.
	leaseRev  uint64
	leaseSeen time.Time
	// silentRev is the leaseRev at which a forwarded command found no
	// writer answering the holder's term: until a newer revision, the
	// holder is not serving (it stepped down or died, its lease not yet
	// expired).
	silentRev uint64
	// leaseMoved is closed when lease changes (and replaced): forwarded
	// commands in flight then give up (see forward).
	leaseMoved chan struct{}
	// elected is closed when JetStream announces a stream's new leader
	// (and replaced): a read sent into the election got no answer and
	// waits out its bound, while the leader now answers at once.
	elected   chan struct{}
	head      uint64
	takeovers uint64
	// lastSeq is the highest LastSeq answered: a node stepping down goes
	// on with the follower started at its takeover (from a snapshot or the
	// first event), and its reads gated by min_seq must not go back behind
	// what it already answered.
	lastSeq atomic.Uint64
	// followerSnaps is set while the node is the writer and its writer
	// took a standby's ledger (settlement.Config.Start), which leaves it
	// no snapshotter: the node's follower then takes the writer's
	// snapshots.
	followerSnaps atomic.Bool
}

// NewNode returns a node; Run makes it take part.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Store == nil || cfg.Lease == nil {
		return nil, errors.New("cluster node: no store or lease")
	}
	if err := cfg.Writer.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{cfg: cfg, fwd: NewForwarder(cfg.Store.Conn(), settlement.Chain),
		leaseMoved: make(chan struct{}), elected: make(chan struct{})}, nil
}

// Execute implements api.Writer: locally on the writer, forwarded to it
// anywhere else. Errors as settlement.Writer.Execute and Forwarder.Execute.
// A local answer raises LastSeq: the writer may step down before the
// caller reads, and the node's position must not then fall behind it.
func (n *Node) Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	if w := n.localWriter(); w != nil {
		res, err := w.Execute(ctx, cmd)
		raise(&n.lastSeq, res.LastSeq())
		return res, err
	}
	return n.forward(ctx, cmd)
}

// errLeaseMoved cancels a forwarded command when the lease changes.
var errLeaseMoved = errors.New("the writer lease changed hands")

// forward sends cmd to the writer and gives up as soon as the lease
// expires or changes hands: a writer killed with the request in hand never
// answers, and its client should learn at the takeover (about the lease's
// TTL), not after ForwardWaitMax, that it must retry with its key. The
// command may have been recorded by the old writer; the retry, executed by
// the new one with the same key, answers its outcome exactly once.
func (n *Node) forward(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	n.mu.Lock()
	known := n.lease.Holder != ""
	n.mu.Unlock()
	if !known {
		// A node starting, or one that saw the lease expire: the holder's
		// term names the subject its commands go to, so read it now rather
		// than wait for the watch.
		if r, err := n.cfg.Lease.Read(ctx); err == nil {
			n.noteLease(r)
		}
	}
	n.mu.Lock()
	moved, rev := n.leaseMoved, n.leaseRev
	n.mu.Unlock()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-moved:
			cancel(errLeaseMoved)
		case <-fctx.Done():
		}
	}()
	res, err := n.fwd.Execute(fctx, cmd)
	if errors.Is(err, ErrNoWriter) {
		// Readiness says so too, until the lease moves on: the holder
		// that does not answer is not renewing either, and a standby saw
		// its lease as fresh for up to two TTLs meanwhile.
		n.mu.Lock()
		if n.leaseRev == rev {
			n.silentRev = rev
		}
		n.mu.Unlock()
	}
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fctx), errLeaseMoved) {
		return settlement.Result{}, fmt.Errorf("%w: %v while the command was forwarded: retry with its key", settlement.ErrNotReady, errLeaseMoved)
	}
	return res, err
}

// LastSeq implements api.Writer: the writer's last durable sequence, or on
// a standby the furthest it knows durable (its state, the writer's last
// answer); never less than it answered before (a step-down goes on with a
// follower that may be behind).
func (n *Node) LastSeq() uint64 {
	var seq uint64
	if w := n.localWriter(); w != nil {
		seq = w.LastSeq()
	} else {
		n.mu.Lock()
		f := n.follower
		n.mu.Unlock()
		seq = n.fwd.LastSeq()
		if f != nil {
			seq = max(seq, f.position())
		}
	}
	return raise(&n.lastSeq, seq)
}

// leaseUnseenTTLs is how many lease TTLs a standby goes without seeing the
// lease written before it no longer says a writer holds it. A holder
// renews it every quarter TTL and a standby reads it every half TTL; in a
// NATS cluster that lost its quorum the reads still succeed (a replica
// answers, as of before the loss) but nothing is written, and the standby
// kept naming the last holder, its readiness 200 for the whole outage while
// every command it forwarded answered 503.
const leaseUnseenTTLs = 2

// Ready reports whether the node can take commands now (Err is nil).
func (n *Node) Ready() bool { return n.Err() == nil }

// Err says why the node cannot take commands now, nil when it can: it is
// the writer, or a writer holds the lease, renewed within leaseUnseenTTLs
// TTLs as far as this node has seen. ErrNoWriter while nobody holds it.
// (A lease bucket deleted and created again while the nodes run starts its
// revisions again: a standby then says the lease unseen until restarted.)
func (n *Node) Err() error {
	n.mu.Lock()
	writer, holder, seen, silent := n.writer != nil, n.lease.Holder, n.leaseSeen, n.leaseRev != 0 && n.silentRev == n.leaseRev
	leading, openErr := n.term != 0, n.openErr
	n.mu.Unlock()
	switch unseen := time.Since(seen); {
	case writer:
		return nil
	case leading && openErr != nil:
		// A writer that cannot open (a stream it cannot prove, say) must
		// not leave its node ready: every command would wait on it.
		return fmt.Errorf("%w: this node holds the writer lease but its writer does not open: %v", settlement.ErrNotReady, openErr)
	case leading:
		return fmt.Errorf("%w: this node holds the writer lease and is opening its writer", settlement.ErrNotReady)
	case holder == "":
		return ErrNoWriter
	case silent:
		return fmt.Errorf("%w: the writer lease is %s's, but no writer answers its term: a takeover is under way", settlement.ErrNotReady, holder)
	case seen.IsZero():
		// One read cannot tell a live lease from a copy nobody renews
		// (a writer frozen, a cluster without its quorum): the next
		// renewal, within a quarter TTL, can.
		return fmt.Errorf("%w: the writer lease of %s has not been seen renewed yet", settlement.ErrNotReady, holder)
	case unseen > leaseUnseenTTLs*n.cfg.Lease.TTL():
		return fmt.Errorf("%w: the writer lease of %s has not been seen renewed for %s (is the NATS cluster up, with its quorum?)", settlement.ErrNotReady, holder, unseen.Round(time.Second))
	}
	return nil
}

// Status returns the node's role, the lease and the standby's lag; no I/O.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Status{Role: RoleStandby, Holder: n.lease.Holder, Term: n.lease.Term, Takeovers: n.takeovers}
	if n.writer != nil {
		s.Role, s.Holder, s.Term = RoleWriter, n.cfg.Lease.Holder(), n.term
		s.FollowerSeq = n.writer.LastSeq()
		return s
	}
	if n.follower != nil {
		s.FollowerSeq = n.follower.position()
	}
	if n.head > s.FollowerSeq {
		s.StandbyLag = n.head - s.FollowerSeq
	}
	return s
}

func (n *Node) localWriter() *settlement.Writer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.writer
}

// Run takes part in the cluster until ctx ends: standby, writer when it
// wins the lease, standby again when it loses it. On return (ctx ended) a
// writer has committed what it was given, written its closing seal and
// released the lease, so that a standby takes over at once.
func (n *Node) Run(ctx context.Context) error {
	n.mu.Lock()
	n.follower = n.startFollower()
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		f := n.follower
		n.follower = nil
		n.mu.Unlock()
		f.stop()
	}()
	defer n.watchElections()()
	ttl := n.cfg.Lease.TTL()
	tick := time.NewTicker(ttl / 2)
	defer tick.Stop()
	var watch <-chan eventstore.LeaseRead
	var opening chan (<-chan eventstore.LeaseRead) // a watch being opened
	var free time.Time                             // since when this node has seen the lease free
	var hurry time.Time                            // until when the lease is read every retryPause
	for {
		if watch == nil && opening == nil {
			opening = make(chan (<-chan eventstore.LeaseRead), 1)
			go n.openWatch(ctx, opening)
		}
		var again <-chan time.Time
		if time.Now().Before(hurry) {
			again = time.After(retryPause)
		}
		var read eventstore.LeaseRead // the lease as read now; a zero one when free or unread
		select {
		case <-ctx.Done():
			return nil
		case watch = <-opening:
			opening = nil
			continue
		case r, ok := <-watch:
			if !ok {
				watch = nil
				continue
			}
			n.noteLease(r)
			read = r
		case <-n.elections():
			// A writer's renewals may have gone unanswered through the
			// election: reading the lease often for a while takes it
			// over as soon as it is free or abandoned.
			hurry = time.Now().Add(leaseUnseenTTLs * ttl)
			read = n.poll(ctx)
		case <-again:
			read = n.poll(ctx)
		case <-tick.C:
			read = n.poll(ctx)
		}
		term, won := n.contend(ctx, read, &free)
		if !won {
			continue
		}
		n.lead(ctx, term)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// openWatch opens a watch of the lease and sends it on out (nil when it
// could not, after a pause). A watch opened while the lease bucket elects
// its leader waits for it: the node's loop goes on meanwhile, reading the
// lease at its tick.
func (n *Node) openWatch(ctx context.Context, out chan<- (<-chan eventstore.LeaseRead)) {
	w, err := n.cfg.Lease.Watch(ctx)
	if err != nil && ctx.Err() == nil {
		n.cfg.Logger.Warn("watch the writer lease", "err", err)
		sleep(ctx, retryPause)
	}
	out <- w
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// contend tries to win the lease when it is free (free since *free, set
// here) or abandoned (read names a holder), if this node competes: the
// term won, or false.
func (n *Node) contend(ctx context.Context, read eventstore.LeaseRead, free *time.Time) (uint64, bool) {
	var rev uint64
	since := *free
	if read.Holder != "" {
		*free = time.Time{}
		if rev, since = n.abandoned(read.Revision); rev == 0 {
			return 0, false
		}
	} else if free.IsZero() {
		*free, since = time.Now(), time.Now()
	}
	if !n.mayCompete(ctx, since) {
		return 0, false
	}
	var term uint64
	var err error
	if rev != 0 {
		term, err = n.cfg.Lease.TakeOver(ctx, rev)
	} else {
		term, err = n.cfg.Lease.Acquire(ctx)
	}
	if err != nil {
		if !errors.Is(err, eventstore.ErrLeaseHeld) && ctx.Err() == nil {
			n.cfg.Logger.Warn("acquire the writer lease", "err", err)
		}
		if errors.Is(err, eventstore.ErrLeaseHeld) {
			*free = time.Time{}
		}
		return 0, false
	}
	if rev != 0 {
		n.cfg.Logger.Info("took over the writer lease its holder abandoned", "revision", rev)
	}
	*free = time.Time{}
	return term, true
}

// abandoned returns rev, the revision of a lease read naming a holder,
// when this node has not seen the lease renewed for a TTL since it first
// read that revision, and since when it is abandoned; 0 otherwise. Its
// holder stopped writing by then (eventstore.Lease.Valid), whatever the
// bucket still shows: a new leader of the bucket expires it seconds after
// its election, and a takeover need not wait for that.
func (n *Node) abandoned(rev uint64) (uint64, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ttl := n.cfg.Lease.TTL()
	if n.writer != nil || rev == 0 || rev != n.leaseRev || n.leaseSeen.IsZero() || time.Since(n.leaseSeen) <= ttl {
		return 0, time.Time{}
	}
	return rev, n.leaseSeen.Add(ttl)
}

// poll reads the stream's head, for the standby's lag, and the lease
// itself: the watch tells of releases and expiries at once, but it can
// stall without closing after a NATS leader change, and the forwarded
// commands need the current term. It returns the lease as read, a zero
// one when it could not be read.
func (n *Node) poll(ctx context.Context) eventstore.LeaseRead {
	n.readHead(ctx)
	r, err := n.cfg.Lease.Read(ctx)
	if err != nil {
		return eventstore.LeaseRead{}
	}
	n.noteLease(r)
	return r
}

// electedSubject is where JetStream announces each stream's new leader:
// the chain's stream, the lease and high-water buckets among them.
const electedSubject = eventstore.LeaderElectedPrefix + ">"

// watchElections wakes the node's waits at every stream leader elected,
// until the function it returns is called. Without the announcements
// (a subscription refused) the node still works, at its bounds' pace.
func (n *Node) watchElections() (stop func()) {
	sub, err := n.cfg.Store.Conn().Subscribe(electedSubject, func(*nats.Msg) {
		n.mu.Lock()
		defer n.mu.Unlock()
		close(n.elected)
		n.elected = make(chan struct{})
	})
	if err != nil {
		n.cfg.Logger.Warn("watch JetStream's leader elections", "err", err)
		return func() {}
	}
	return func() { sub.Unsubscribe() }
}

// elections returns a channel closed at the next stream leader elected.
func (n *Node) elections() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.elected
}

// CaughtUpLagMax is how far behind the stream's head a standby's ledger
// may be for it to compete for a free lease at once: its takeover then
// replays no more than that. A standby further behind (one just started,
// replaying the history) competes only once the lease has been free for a
// TTL, when no caught-up node took it.
const CaughtUpLagMax = 1000

// mayCompete reads the stream's head and says whether this node competes
// for the lease, free since free: when its follower is caught up, or when
// none that is has taken the lease for a TTL.
func (n *Node) mayCompete(ctx context.Context, free time.Time) bool {
	n.readHead(ctx)
	n.mu.Lock()
	var at uint64
	if n.follower != nil {
		at = n.follower.position()
	}
	lag := n.head - min(at, n.head)
	n.mu.Unlock()
	if competes(lag, time.Since(free), n.cfg.Lease.TTL()) {
		return true
	}
	n.cfg.Logger.Debug("not competing for the free lease: behind the stream's head", "lag", lag)
	return false
}

// competes says whether a standby lag events behind the stream's head
// competes for a lease free for freeFor, of TTL ttl.
func competes(lag uint64, freeFor, ttl time.Duration) bool {
	return lag <= CaughtUpLagMax || freeFor > ttl
}

// noteLease records the lease as read (a watch's update, a read) unless
// it is no newer than what the node knows: the same revision again is a
// copy nobody renews, and an older one is behind (the last value of the
// watch of a writer that has just stepped down, its own last renewal,
// would make it name itself holder again). The first read only names the
// holder: the lease is seen renewed once a newer revision comes. An
// absent key is news at any time: nobody holds the lease.
func (n *Node) noteLease(r eventstore.LeaseRead) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case r.Revision == 0:
		n.moveLease(eventstore.LeaseInfo{})
	case r.Revision > n.leaseRev:
		n.moveLease(r.LeaseInfo)
		if n.leaseRev == 0 {
			n.leaseRev = r.Revision
			return
		}
		n.wroteLease(r.Revision)
	}
}

// wroteLease records that the lease's key was written at revision rev,
// which this node has just read or written itself. n.mu is held.
func (n *Node) wroteLease(rev uint64) {
	n.leaseRev = max(n.leaseRev, rev)
	n.leaseSeen = time.Now()
}

// moveLease records the lease as seen now and, when it moved away from a
// holder (expired, released, or another's), wakes the forwarded commands
// waiting on that holder. Learning the holder (from none, as a node starts)
// moves nothing: a command forwarded then went to whoever answers the
// subject. n.mu is held.
func (n *Node) moveLease(info eventstore.LeaseInfo) {
	if n.lease.Holder != "" && info != n.lease {
		close(n.leaseMoved)
		n.leaseMoved = make(chan struct{})
	}
	n.lease = info
	n.fwd.SetTerm(info.Term)
}

// readHead reads the stream's head, for the standby's lag. The read is
// bounded as the lease's are: sent into the stream's election, it must
// not hold the node's loop from the lease for the store's whole timeout.
func (n *Node) readHead(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Lease.TTL()/4)
	defer cancel()
	head, err := n.cfg.Store.LastSequence(ctx)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.head = head
}

// lead is the node's time as the writer, from the lease won with term
// until it is lost or ctx ends. A writer whose append failed while it still
// holds the lease (outcome unknown: a NATS node or the stream's leader was
// lost) reopens: the new writer's replay reads what landed, and the hash
// chain tells whether the batch did.
func (n *Node) lead(ctx context.Context, term uint64) {
	log := n.cfg.Logger.With("term", term)
	won := time.Now()
	n.mu.Lock()
	n.takeovers++
	n.term = term
	n.moveLease(eventstore.LeaseInfo{Holder: n.cfg.Lease.Holder(), Term: term})
	n.wroteLease(term)
	n.mu.Unlock()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan error, 1)
	go n.renew(lctx, lost)
	var failing time.Time // since when the writer's opens have failed
	for {
		elected := n.elections()
		w, elog, err := n.openWriter(lctx, elected)
		n.mu.Lock()
		n.openErr = err
		n.mu.Unlock()
		if err != nil {
			if failing.IsZero() {
				failing = time.Now()
			}
			// A node that cannot reach the stream for that long hands
			// the lease on, rather than keep it from a standby that
			// may.
			if lctx.Err() != nil || errors.Is(err, eventstore.ErrFenced) || !n.cfg.Lease.Valid() ||
				time.Since(failing) > openWriterTTLs*n.cfg.Lease.TTL() {
				log.Error("could not open the writer; stepping down", "err", err, "failing_for", time.Since(failing).Round(time.Millisecond))
				n.stepDown(ctx, nil, nil, nil, err)
				return
			}
			log.Warn("could not open the writer; trying again", "err", err)
			select {
			case <-lctx.Done():
			case <-elected:
			case <-time.After(retryPause):
			}
			continue
		}
		failing = time.Time{}
		svc, err := Serve(n.cfg.Store.Conn(), settlement.Chain, term, w, n.cfg.Logger)
		if err != nil {
			log.Error("could not serve forwarded commands; stepping down", "err", err)
			n.stepDown(ctx, w, elog, nil, err)
			return
		}
		n.mu.Lock()
		n.writer = w
		n.mu.Unlock()
		log.Info("writer ready", "seq", w.LastSeq(), "after", time.Since(won).Round(time.Millisecond))
		select {
		case <-ctx.Done():
			n.stepDown(ctx, w, elog, svc, nil)
			return
		case err := <-lost:
			log.Error("writer lease lost; stepping down to standby", "err", err)
			n.stepDown(ctx, w, elog, svc, err)
			return
		case <-w.Done():
			if errors.Is(w.Err(), eventstore.ErrFenced) || !n.cfg.Lease.Valid() {
				log.Error("writer fenced; stepping down to standby", "err", w.Err())
				n.stepDown(ctx, w, elog, svc, w.Err())
				return
			}
			log.Warn("writer stopped on an append; reopening it from the stream", "err", w.Err())
			n.closeWriter(w, elog, svc, nil)
		}
	}
}

// renew renews the lease well inside its TTL until ctx ends, and reports on
// lost when it is lost: taken over (a failed compare-and-set) or not
// renewed in time (Valid keeps a margin, so the writer stops before the
// server lets another node acquire).
func (n *Node) renew(ctx context.Context, lost chan<- error) {
	t := time.NewTicker(n.cfg.Lease.TTL() / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := n.cfg.Lease.Renew(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, eventstore.ErrLeaseLost) || !n.cfg.Lease.Valid() {
			if err == nil {
				err = eventstore.ErrLeaseLost
			}
			lost <- err
			return
		}
		if err != nil {
			n.cfg.Logger.Warn("renew the writer lease; retrying", "err", err)
			continue
		}
		n.mu.Lock()
		n.wroteLease(n.cfg.Lease.Revision())
		n.mu.Unlock()
	}
}

// startFollower starts a follower from the newest usable snapshot, which
// takes the writer's snapshots while followerSnaps is set.
func (n *Node) startFollower() *follower {
	return startFollower(&n.cfg.Writer, n.cfg.Store, n.cfg.Logger, n.followerSnaps.Load)
}

// openWriter opens the writer from the follower's ledger (replaying only
// the tail past it) and starts a fresh follower, from the newest snapshot,
// for the next takeover or reopen; that follower takes the writer's
// snapshots when the writer took the ledger (a writer that loaded its own
// start, the follower having none yet, keeps its own snapshotter). The
// event log's start reads give up when elected is closed: a leader was
// elected meanwhile, and a try sent to it now is answered at once.
func (n *Node) openWriter(ctx context.Context, elected <-chan struct{}) (*settlement.Writer, *settlement.EventLog, error) {
	cfg := n.cfg.Writer
	cfg.MayAnswer = n.leaseValid
	cfg.Start = n.startingLedger()
	ccfg := n.cfg.Committer
	ccfg.MaySend = n.leaseValid
	// A read sent into a stream leader's election gets no answer: the
	// lead loop tries again at once rather than wait the request timeout.
	ccfg.StartReadMax = startReadMax
	octx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-elected:
			cancel()
		case <-octx.Done():
		}
	}()
	elog, err := settlement.OpenEventLog(octx, n.cfg.Store, ccfg)
	cancel()
	if err != nil {
		// Nothing was applied to the ledger: the next try keeps it.
		n.mu.Lock()
		n.kept = cfg.Start
		n.mu.Unlock()
		return nil, nil, err
	}
	w, err := settlement.Open(ctx, elog, cfg)
	if err != nil {
		elog.Close()
		return nil, nil, err
	}
	n.followerSnaps.Store(cfg.Start != nil && cfg.Snapshots != nil)
	return w, elog, nil
}

// startingLedger is the ledger a writer opens from: the one a failed open
// kept, or the follower's, which a fresh follower then replaces (nil when
// the follower has none: the writer then loads its own start).
func (n *Node) startingLedger() *settlement.Start {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kept := n.kept; kept != nil {
		n.kept = nil
		n.cfg.Logger.Info("the writer opens from the ledger its last try kept", "seq", kept.Seq)
		return kept
	}
	f := n.follower
	n.follower = n.startFollower()
	start := f.take()
	if start != nil {
		from, applied := f.progress()
		n.cfg.Logger.Info("the writer opens from the standby's ledger", "seq", start.Seq, "follower_from", from, "follower_applied", applied)
	}
	return start
}

// leaseValid is the committer's check before each batch, and the
// writer's before an answer decided on its ledger alone: the lease is
// surely still this node's.
func (n *Node) leaseValid() error {
	if !n.cfg.Lease.Valid() {
		return fmt.Errorf("%w: not renewed in time", eventstore.ErrLeaseLost)
	}
	return nil
}

// stepDown stops being the writer. lost is why (nil for a graceful stop):
// a writer that lost the lease aborts its appends first, so that nothing of
// its lands after another node took over, and writes no closing seal; a
// graceful stop commits what it was given, seals, and releases the lease
// at once.
func (n *Node) stepDown(ctx context.Context, w *settlement.Writer, elog *settlement.EventLog, svc micro.Service, lost error) {
	// Nobody holds the lease as far as this node knows, from the moment
	// it is no longer the writer: its own name as holder would make it
	// ready, forwarding to a service it no longer runs.
	n.mu.Lock()
	n.term, n.openErr = 0, nil
	// A standby's follower takes over from here: a ledger kept for a
	// writer's next try would only grow stale in memory.
	n.kept = nil
	n.moveLease(eventstore.LeaseInfo{})
	n.mu.Unlock()
	n.closeWriter(w, elog, svc, lost)
	// A lease no longer valid expires by itself, and another node may
	// hold it already: a release would only wait on a cluster that
	// could not renew it.
	if (lost == nil || !errors.Is(lost, eventstore.ErrLeaseLost)) && n.cfg.Lease.Valid() {
		if err := n.cfg.Lease.Release(context.WithoutCancel(ctx)); err != nil {
			n.cfg.Logger.Warn("release the writer lease", "err", err)
		}
	}
}

// closeWriter stops serving and closes the writer and its log; with lost
// set, the log is aborted first.
func (n *Node) closeWriter(w *settlement.Writer, elog *settlement.EventLog, svc micro.Service, lost error) {
	n.followerSnaps.Store(false)
	n.mu.Lock()
	n.writer = nil
	n.mu.Unlock()
	if svc != nil {
		svc.Stop()
	}
	if elog != nil && lost != nil {
		elog.Abort(fmt.Errorf("%w: %w", settlement.ErrStopped, lost))
	}
	if w != nil {
		w.Close()
	}
	if elog != nil {
		elog.Close()
	}
}
