package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event is a fact recorded by the write side: something that happened and
// will never be undone. Its type string and schema version are part of the
// log's contract: a type is never renamed, and a change of shape gets a new
// schema version with an upcaster.
type Event interface {
	// EventType is the event's stable type string ("StakePlaced").
	EventType() string
	// AggregateID names the stream of facts the event belongs to, such as
	// "player.p-42" or "block.E0001-B001"; it becomes part of the subject.
	AggregateID() string
}

// Stable event type strings. Never rename one: regulators' tools and every
// stored event depend on them.
const (
	TypeAccountOpened   = "AccountOpened"
	TypeLimitChanged    = "LimitChanged"
	TypeSelfExcluded    = "SelfExcluded"
	TypeFundsDeposited  = "FundsDeposited"
	TypeFundsWithdrawn  = "FundsWithdrawn"
	TypeEmissionCreated = "EmissionCreated"
	TypeBlockOpened     = "BlockOpened"
	TypeBlockExhausted  = "BlockExhausted"
	TypeBlockClosed     = "BlockClosed"
	TypeStakePlaced     = "StakePlaced"
	TypeUnitAssigned    = "UnitAssigned"
	TypeThrowMade       = "ThrowMade"
	TypePlaySettled     = "PlaySettled"
	TypePrizePaid       = "PrizePaid"
)

// SchemaVersion is the current schema version of every domain event type.
// A type whose payload changes shape gets its own entry and an upcaster.
var SchemaVersion = map[string]int{
	TypeAccountOpened: 1, TypeLimitChanged: 1, TypeSelfExcluded: 1,
	TypeFundsDeposited: 1, TypeFundsWithdrawn: 1,
	TypeEmissionCreated: 2, TypeBlockOpened: 1, TypeBlockExhausted: 1, TypeBlockClosed: 1,
	TypeStakePlaced: 1, TypeUnitAssigned: 1, TypeThrowMade: 1, TypePlaySettled: 1, TypePrizePaid: 1,
}

// DecodeEvent turns a stored payload of the given type back into its event.
// Unknown types are an error naming the type, never a silent skip.
func DecodeEvent(eventType string, payload []byte) (Event, error) {
	var e Event
	switch eventType {
	case TypeAccountOpened:
		e = &AccountOpened{}
	case TypeLimitChanged:
		e = &LimitChanged{}
	case TypeSelfExcluded:
		e = &SelfExcluded{}
	case TypeFundsDeposited:
		e = &FundsDeposited{}
	case TypeFundsWithdrawn:
		e = &FundsWithdrawn{}
	case TypeEmissionCreated:
		e = &EmissionCreated{}
	case TypeBlockOpened:
		e = &BlockOpened{}
	case TypeBlockExhausted:
		e = &BlockExhausted{}
	case TypeBlockClosed:
		e = &BlockClosed{}
	case TypeStakePlaced:
		e = &StakePlaced{}
	case TypeUnitAssigned:
		e = &UnitAssigned{}
	case TypeThrowMade:
		e = &ThrowMade{}
	case TypePlaySettled:
		e = &PlaySettled{}
	case TypePrizePaid:
		e = &PrizePaid{}
	default:
		return nil, fmt.Errorf("decode event: unknown event type %q", eventType)
	}
	if err := json.Unmarshal(payload, e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", eventType, err)
	}
	return e, nil
}

// playerAggregate and blockAggregate build aggregate ids.
func playerAggregate(player string) string { return "player." + player }
func blockAggregate(block string) string   { return "block." + block }

// AccountOpened records a new player account, with a zero balance.
type AccountOpened struct {
	Player string `json:"player"`
}

// LimitKind names a responsible-gaming limit.
type LimitKind string

// The two weekly limits French rules require before a first deposit and a
// first stake.
const (
	DepositLimit LimitKind = "deposit"
	StakeLimit   LimitKind = "stake"
)

// LimitChanged records a weekly limit set, lowered or raised. A lowering
// takes effect at once (EffectiveAt is the event's time); a raise takes
// effect 24 hours later, and until then the old limit holds.
type LimitChanged struct {
	Player      string    `json:"player"`
	Kind        LimitKind `json:"kind"`
	Limit       Amount    `json:"limit"`
	EffectiveAt time.Time `json:"effective_at"`
}

// SelfExcluded records that a player excluded themselves from play: the
// account can no longer stake. It is not reversed by Tresor.
type SelfExcluded struct {
	Player string `json:"player"`
}

// FundsDeposited records money paid into a player's account.
type FundsDeposited struct {
	Player  string `json:"player"`
	Amount  Amount `json:"amount"`
	Key     string `json:"idempotency_key"`
	Balance Amount `json:"balance_after"`
}

// FundsWithdrawn records money paid out of a player's account.
type FundsWithdrawn struct {
	Player  string `json:"player"`
	Amount  Amount `json:"amount"`
	Key     string `json:"idempotency_key"`
	Balance Amount `json:"balance_after"`
}

// EmissionCreated records an emission of Blocks blocks of one price. Key is
// the operator's idempotency key (schema 2; absent in schema 1 and when the
// request carried none).
type EmissionCreated struct {
	Emission     string `json:"emission"`
	Price        Amount `json:"price"`
	Blocks       int    `json:"blocks"`
	RulesVersion string `json:"rules_version"`
	Key          string `json:"idempotency_key,omitempty"`
}

// BlockOpened puts a block on sale and publishes its commitment before any
// sale: the SHA-256 of the secret seed and the Merkle root of its deck. The
// seed itself is only here sealed (encrypted under the writers' master key);
// BlockClosed reveals it.
type BlockOpened struct {
	Block      string     `json:"block"`
	Emission   string     `json:"emission"`
	Index      int        `json:"index"`
	Price      Amount     `json:"price"`
	Commitment Commitment `json:"commitment"`
	SealedSeed []byte     `json:"sealed_seed"`
}

// BlockExhausted records that the last unit of a block has been sold.
type BlockExhausted struct {
	Block string `json:"block"`
}

// BlockClosed ends a block and reveals its seed, so that anyone can rebuild
// the deck, check it against the commitment, and recompute every play.
type BlockClosed struct {
	Block string `json:"block"`
	Seed  Seed   `json:"seed"`
	Sold  int    `json:"sold"`
}

// StakePlaced records a stake debited from a player's account for a new play
// (Article 4.2). It is committed atomically with its UnitAssigned.
type StakePlaced struct {
	Play    string `json:"play"`
	Player  string `json:"player"`
	Block   string `json:"block"`
	Stake   Amount `json:"stake"`
	Key     string `json:"idempotency_key"`
	Balance Amount `json:"balance_after"`
}

// UnitAssigned records the game unit a play receives: the next unit of the
// open block, its tier, its leaf salt and its inclusion proof against the
// block's committed root, so that the play can be checked offline.
type UnitAssigned struct {
	Play   string    `json:"play"`
	Player string    `json:"player"`
	Block  string    `json:"block"`
	Proof  UnitProof `json:"proof"`
}

// ThrowMade records one of a play's four throws (Article 4.4): the compass
// direction, the counter, where the pawn lands and the chest it opens, if
// any. BySystem marks a throw made by Tresor for a play its player left.
type ThrowMade struct {
	Play     string      `json:"play"`
	Player   string      `json:"player"`
	Throw    int         `json:"throw"`
	Result   ThrowResult `json:"result"`
	BySystem bool        `json:"by_system,omitempty"`
}

// PlaySettled records the end of a play after its fourth throw: the tier the
// opened chests evaluate to and the prize it pays (zero for none).
type PlaySettled struct {
	Play     string `json:"play"`
	Player   string `json:"player"`
	Block    string `json:"block"`
	Unit     uint32 `json:"unit"`
	Tier     Tier   `json:"tier"`
	Prize    Amount `json:"prize"`
	BySystem bool   `json:"by_system,omitempty"`
}

// PrizePaid records a winning play's prize credited to its player's account
// from its block's prize fund.
type PrizePaid struct {
	Play    string `json:"play"`
	Player  string `json:"player"`
	Block   string `json:"block"`
	Amount  Amount `json:"amount"`
	Balance Amount `json:"balance_after"`
}

// EventType implementations.
func (*AccountOpened) EventType() string   { return TypeAccountOpened }
func (*LimitChanged) EventType() string    { return TypeLimitChanged }
func (*SelfExcluded) EventType() string    { return TypeSelfExcluded }
func (*FundsDeposited) EventType() string  { return TypeFundsDeposited }
func (*FundsWithdrawn) EventType() string  { return TypeFundsWithdrawn }
func (*EmissionCreated) EventType() string { return TypeEmissionCreated }
func (*BlockOpened) EventType() string     { return TypeBlockOpened }
func (*BlockExhausted) EventType() string  { return TypeBlockExhausted }
func (*BlockClosed) EventType() string     { return TypeBlockClosed }
func (*StakePlaced) EventType() string     { return TypeStakePlaced }
func (*UnitAssigned) EventType() string    { return TypeUnitAssigned }
func (*ThrowMade) EventType() string       { return TypeThrowMade }
func (*PlaySettled) EventType() string     { return TypePlaySettled }
func (*PrizePaid) EventType() string       { return TypePrizePaid }

// AggregateID implementations: player facts on the player, block facts on
// the block, emission facts on the emission.
func (e *AccountOpened) AggregateID() string   { return playerAggregate(e.Player) }
func (e *LimitChanged) AggregateID() string    { return playerAggregate(e.Player) }
func (e *SelfExcluded) AggregateID() string    { return playerAggregate(e.Player) }
func (e *FundsDeposited) AggregateID() string  { return playerAggregate(e.Player) }
func (e *FundsWithdrawn) AggregateID() string  { return playerAggregate(e.Player) }
func (e *EmissionCreated) AggregateID() string { return "emission." + e.Emission }
func (e *BlockOpened) AggregateID() string     { return blockAggregate(e.Block) }
func (e *BlockExhausted) AggregateID() string  { return blockAggregate(e.Block) }
func (e *BlockClosed) AggregateID() string     { return blockAggregate(e.Block) }
func (e *StakePlaced) AggregateID() string     { return playerAggregate(e.Player) }
func (e *UnitAssigned) AggregateID() string    { return playerAggregate(e.Player) }
func (e *ThrowMade) AggregateID() string       { return playerAggregate(e.Player) }
func (e *PlaySettled) AggregateID() string     { return playerAggregate(e.Player) }
func (e *PrizePaid) AggregateID() string       { return playerAggregate(e.Player) }

// Posting is one movement of money in double entry: Amount leaves Debit's
// side and reaches Credit's. Every posting is a debit and a credit of the
// same amount, so debits equal credits at every position of the stream.
type Posting struct {
	Debit, Credit string
	Amount        Amount
}

// House accounts. The cash account is the money held for players outside
// the game; each block has a sales account (stakes received) and a prize
// fund account (prizes paid out of it).
const houseCash = "house.cash"

// PlayerAccount, BlockSalesAccount and BlockPrizeAccount name ledger
// accounts in journals.
func PlayerAccount(player string) string    { return "player." + player }
func BlockSalesAccount(block string) string { return "block." + block + ".sales" }
func BlockPrizeAccount(block string) string { return "block." + block + ".prizes" }

// HouseCashAccount names the account of money held for players.
func HouseCashAccount() string { return houseCash }

// Postings returns the movements of money an event records: none for most
// events, one for deposits, withdrawals, stakes and prizes. The journal of
// every projection and of the audit is built from this one function.
// Signs: a player's balance is its credits minus its debits.
func Postings(e Event) []Posting {
	switch e := e.(type) {
	case *FundsDeposited:
		return []Posting{{Debit: houseCash, Credit: PlayerAccount(e.Player), Amount: e.Amount}}
	case *FundsWithdrawn:
		return []Posting{{Debit: PlayerAccount(e.Player), Credit: houseCash, Amount: e.Amount}}
	case *StakePlaced:
		return []Posting{{Debit: PlayerAccount(e.Player), Credit: BlockSalesAccount(e.Block), Amount: e.Stake}}
	case *PrizePaid:
		return []Posting{{Debit: BlockPrizeAccount(e.Block), Credit: PlayerAccount(e.Player), Amount: e.Amount}}
	}
	return nil
}
