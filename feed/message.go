package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/eventstore"
	"github.com/google/uuid"
)

// Kind names a message kind. The kinds and their JSON keys are a contract
// with finance systems (docs/feed.md): add to them, never rename.
type Kind string

// The message kinds.
const (
	// KindPostings is one event's double-entry postings: a deposit, a
	// withdrawal, a stake or a prize.
	KindPostings Kind = "postings"
	// KindPlaySettled is one settled play.
	KindPlaySettled Kind = "play_settled"
)

// Kinds says which message kinds a feed publishes.
type Kinds struct {
	Postings, Plays bool
}

// AllKinds publishes both kinds, the default.
var AllKinds = Kinds{Postings: true, Plays: true}

// ParseKinds reads a comma-separated list of "postings" and "plays".
func ParseKinds(s string) (Kinds, error) {
	var k Kinds
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "postings":
			k.Postings = true
		case "plays":
			k.Plays = true
		default:
			return Kinds{}, fmt.Errorf("kind %q: want postings or plays", f)
		}
	}
	return k, nil
}

// String lists the kinds as ParseKinds reads them.
func (k Kinds) String() string {
	var s []string
	if k.Postings {
		s = append(s, "postings")
	}
	if k.Plays {
		s = append(s, "plays")
	}
	return strings.Join(s, ",")
}

// Side is the side of a posting line.
type Side string

// The two sides of a posting.
const (
	Debit  Side = "debit"
	Credit Side = "credit"
)

// Line is one side of a posting: an account and the amount that leaves it
// (debit) or reaches it (credit). A balance is credits minus debits.
type Line struct {
	Account string        `json:"account"`
	Side    Side          `json:"side"`
	Amount  domain.Amount `json:"amount"`
}

// Header is what every message carries: its kind and the event it comes
// from (stream sequence, id, type and time, the time that reconciliation
// files a day under).
type Header struct {
	Kind      Kind      `json:"kind"`
	Seq       uint64    `json:"seq"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	At        time.Time `json:"at"`
}

// Postings is the payload of a postings message: one event's postings, a
// debit line and a credit line for each (domain.Postings), with the
// player, play, block and adjustment they concern where they apply.
type Postings struct {
	Header
	Player string `json:"player,omitempty"`
	Play   string `json:"play,omitempty"`
	Block  string `json:"block,omitempty"`
	// Adjustment is the id of an approved adjustment, for finance to
	// match the postings with its four-eyes record.
	Adjustment string `json:"adjustment,omitempty"`
	Lines      []Line `json:"lines"`
}

// PlaySettled is the payload of a play_settled message: a settled play
// with its stake, tier and prize.
type PlaySettled struct {
	Header
	Play     string        `json:"play"`
	Player   string        `json:"player"`
	Block    string        `json:"block"`
	Unit     uint32        `json:"unit"`
	Stake    domain.Amount `json:"stake"`
	Tier     domain.Tier   `json:"tier"`
	Prize    domain.Amount `json:"prize"`
	BySystem bool          `json:"by_system"`
}

// Message is one message of the feed, ready for any target.
type Message struct {
	// UUID is derived from the event id (MessageUUID): the same event
	// always gives the same UUID, so a consumer deduplicates on it.
	UUID      string
	Kind      Kind
	Seq       uint64
	EventID   string
	EventType string
	// Player and Block are copied into the message's metadata (AMQP
	// headers) for routing; empty when the event has none.
	Player, Block string
	// Payload is the JSON of Postings or PlaySettled.
	Payload []byte
}

// uuidSpace is the UUID namespace of Tresor's feed messages; docs/feed.md
// gives it, so that anyone can recompute a message's UUID.
var uuidSpace = uuid.MustParse("5b0c6e0e-3f7a-5d8e-9c1b-7e2f4a6d8c10")

// MessageUUID derives a message's UUID from its kind and event id: a
// name-based UUID (version 5, SHA-1) of "<kind>/<event id>" in Tresor's
// feed namespace.
func MessageUUID(kind Kind, eventID string) string {
	return uuid.NewSHA1(uuidSpace, []byte(string(kind)+"/"+eventID)).String()
}

// Watermill returns the message as watermill publishes it: the UUID, the
// payload, and metadata (AMQP headers, the SQL metadata column) that name
// the kind, the event and the player and block, for routing without
// reading the payload.
func (m Message) Watermill() *message.Message {
	w := message.NewMessage(m.UUID, m.Payload)
	w.Metadata.Set("kind", string(m.Kind))
	w.Metadata.Set("seq", strconv.FormatUint(m.Seq, 10))
	w.Metadata.Set("event_id", m.EventID)
	w.Metadata.Set("event_type", m.EventType)
	if m.Player != "" {
		w.Metadata.Set("player", m.Player)
	}
	if m.Block != "" {
		w.Metadata.Set("block", m.Block)
	}
	return w
}

// stakesMax bounds the plays whose stake the builder remembers until they
// settle: a play is either settled or completed by the system after its
// timeout, so this is far more than the plays in progress at once.
const stakesMax = 1_000_000

// feeds lists the event types that give a message: those that move money
// (docs/events.md, "Money") and the settlement.
var feeds = map[string]bool{
	domain.TypeFundsDeposited: true, domain.TypeFundsWithdrawn: true, domain.TypeStakePlaced: true,
	domain.TypePrizePaid: true, domain.TypeAdjustmentApproved: true, domain.TypePlaySettled: true,
}

// builder turns recorded events into messages.
type builder struct {
	kinds Kinds
	// stakes holds the stake of each play staked and not yet settled, for
	// its play_settled message.
	stakes map[string]domain.Amount
	// store finds the stake of a play staked before the feed's first
	// event, in its player's aggregate.
	store eventstore.Store
	// slab is where payloads are written (encode).
	slab []byte
}

func newBuilder(kinds Kinds, store eventstore.Store) *builder {
	return &builder{kinds: kinds, stakes: map[string]domain.Amount{}, store: store}
}

// build returns the message of an event, or nil when the event gives none
// (a throw, a seal, a kind not published). An event that does not decode
// is an error: a feed never skips what it cannot read.
func (b *builder) build(ctx context.Context, r eventstore.RecordedEvent) (*Message, error) {
	if !r.LedgerFact() || !feeds[r.Type] && domain.SchemaVersion[r.Type] != 0 {
		// A seal, a void, a voided event, or a domain event that gives no message: a unit's
		// proof or a throw is not decoded for nothing. An unknown type
		// still goes to DecodeEvent, and fails there.
		return nil, nil
	}
	e, ok := codec.FastDecodeEvent(r.Type, r.Payload)
	if !ok {
		var err error
		if e, err = domain.DecodeEvent(r.Type, r.Payload); err != nil {
			return nil, err
		}
	}
	h := Header{Seq: r.Sequence, EventID: r.ID, EventType: r.Type, At: r.RecordedAt}
	var p payload
	var player, block string
	switch e := e.(type) {
	case *domain.PlaySettled:
		stake, err := b.stake(ctx, r, e)
		if err != nil || !b.kinds.Plays {
			return nil, err
		}
		h.Kind, player, block = KindPlaySettled, e.Player, e.Block
		p = &PlaySettled{Header: h, Play: e.Play, Player: e.Player, Block: e.Block, Unit: e.Unit,
			Stake: stake, Tier: e.Tier, Prize: e.Prize, BySystem: e.BySystem}
	default:
		if s, ok := e.(*domain.StakePlaced); ok && b.kinds.Plays {
			if len(b.stakes) >= stakesMax {
				return nil, fmt.Errorf("more than %d plays staked and not settled", stakesMax)
			}
			b.stakes[s.Play] = s.Stake
		}
		postings := domain.Postings(e)
		if len(postings) == 0 || !b.kinds.Postings {
			return nil, nil
		}
		h.Kind = KindPostings
		ps := &Postings{Header: h, Lines: make([]Line, 0, 2*len(postings))}
		ps.Player, ps.Play, ps.Block, ps.Adjustment = postingRefs(e)
		for _, x := range postings {
			ps.Lines = append(ps.Lines, Line{Account: x.Debit, Side: Debit, Amount: x.Amount},
				Line{Account: x.Credit, Side: Credit, Amount: x.Amount})
		}
		player, block, p = ps.Player, ps.Block, ps
	}
	body, err := b.encode(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s message: %w", h.Kind, err)
	}
	return &Message{UUID: MessageUUID(h.Kind, r.ID), Kind: h.Kind, Seq: r.Sequence, EventID: r.ID, EventType: r.Type,
		Player: player, Block: block, Payload: body}, nil
}

// payload is a message's payload: *Postings or *PlaySettled.
type payload interface {
	appendJSON(b []byte) ([]byte, bool)
}

// Payloads are written into slabs of slabSize bytes, a new one when less
// than slabFreeMin is left (a payload is about 300 bytes): one allocation
// for some two hundred messages instead of several per message.
const (
	slabSize    = 64 << 10
	slabFreeMin = 1 << 10
)

// encode writes p's JSON, by hand when it can (appendJSON), with
// encoding/json otherwise.
func (b *builder) encode(p payload) ([]byte, error) {
	if cap(b.slab)-len(b.slab) < slabFreeMin {
		b.slab = make([]byte, 0, slabSize)
	}
	free := cap(b.slab) - len(b.slab)
	out, ok := p.appendJSON(b.slab[len(b.slab):])
	switch {
	case !ok:
		return json.Marshal(p)
	case len(out) <= free: // written in the slab: claim it
		b.slab = b.slab[:len(b.slab)+len(out)]
		return out[:len(out):len(out)], nil
	}
	return out, nil
}

// postingRefs names the player, play, block and adjustment an event's
// postings concern.
func postingRefs(e domain.Event) (player, play, block, adjustment string) {
	switch e := e.(type) {
	case *domain.FundsDeposited:
		return e.Player, "", "", ""
	case *domain.FundsWithdrawn:
		return e.Player, "", "", ""
	case *domain.AdjustmentApproved:
		return e.Player, "", "", e.Adjustment
	case *domain.StakePlaced:
		return e.Player, e.Play, e.Block, ""
	case *domain.PrizePaid:
		return e.Player, e.Play, e.Block, ""
	}
	return "", "", "", ""
}

// stake returns the stake of a settled play and forgets it: from the
// StakePlaced the builder saw, or, for a play staked before the feed's
// first event, from its player's aggregate (the same subject as the
// settlement), read once.
func (b *builder) stake(ctx context.Context, r eventstore.RecordedEvent, e *domain.PlaySettled) (domain.Amount, error) {
	if !b.kinds.Plays {
		return 0, nil
	}
	if s, ok := b.stakes[e.Play]; ok {
		delete(b.stakes, e.Play)
		return s, nil
	}
	events, err := b.store.LoadAggregate(ctx, r.Chain, r.Aggregate)
	if err != nil {
		return 0, fmt.Errorf("find the stake of play %s: %w", e.Play, err)
	}
	// The last stake of the play before its settlement: a stake voided
	// with its torn append, and staked again, names the same play.
	var stake *domain.StakePlaced
	for _, x := range events {
		if x.Type != domain.TypeStakePlaced || x.Sequence > r.Sequence {
			continue
		}
		var s domain.StakePlaced
		if err := json.Unmarshal(x.Payload, &s); err != nil {
			return 0, fmt.Errorf("find the stake of play %s: decode sequence %d: %w", e.Play, x.Sequence, err)
		}
		if s.Play == e.Play {
			stake = &s
		}
	}
	if stake == nil {
		return 0, fmt.Errorf("play %s settled at sequence %d has no stake in %s", e.Play, r.Sequence, r.Aggregate)
	}
	return stake.Stake, nil
}
