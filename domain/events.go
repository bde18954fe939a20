package domain

import (
	"encoding/json"
	"fmt"
	"regexp"
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
	// Responsible-gaming controls and the settings they run under.
	TypeSelfExcludedUntil = "SelfExcludedUntil"
	TypePlayerBanned      = "PlayerBanned"
	TypeBanLifted         = "BanLifted"
	TypeSettingsAdopted   = "SettingsAdopted"
	// Suspensions of sales and their ends.
	TypeSalesSuspended = "SalesSuspended"
	TypeSalesResumed   = "SalesResumed"
	// Closures of accounts and their reopenings.
	TypeAccountClosed   = "AccountClosed"
	TypeAccountReopened = "AccountReopened"
	// The writers' master key.
	TypeSeedsResealed = "SeedsResealed"
	// Adjustments: proposed, then approved (which moves the money) or
	// rejected.
	TypeAdjustmentProposed = "AdjustmentProposed"
	TypeAdjustmentApproved = "AdjustmentApproved"
	TypeAdjustmentRejected = "AdjustmentRejected"
	// Revocations of API tokens.
	TypeTokenRevoked = "TokenRevoked"
)

// SchemaVersion is the current schema version of every domain event type.
// A type whose payload changes shape gets its own entry and an upcaster.
// Version 2 of AccountOpened, LimitChanged, SelfExcluded, FundsDeposited,
// FundsWithdrawn and BlockClosed, and version 3 of EmissionCreated, add who
// gave the command (by) and, where an action needs one, its reason;
// LimitChanged 2 adds its period. Every older payload reads as the new one
// without the fields (docs/events.md, "Schema versions"). The next version
// of every type that carries a staff subject or free text says that those
// fields may be sealed (SealedPrefix): same keys, same shape.
var SchemaVersion = map[string]int{
	TypeAccountOpened: 3, TypeLimitChanged: 3, TypeSelfExcluded: 3,
	TypeFundsDeposited: 3, TypeFundsWithdrawn: 3,
	TypeEmissionCreated: 4, TypeBlockOpened: 1, TypeBlockExhausted: 1, TypeBlockClosed: 3,
	TypeStakePlaced: 1, TypeUnitAssigned: 1, TypeThrowMade: 1, TypePlaySettled: 1, TypePrizePaid: 1,
	TypeSelfExcludedUntil: 2, TypePlayerBanned: 2, TypeBanLifted: 2, TypeSettingsAdopted: 1,
	TypeSalesSuspended: 2, TypeSalesResumed: 2, TypeAccountClosed: 2, TypeAccountReopened: 2,
	TypeSeedsResealed:      1,
	TypeAdjustmentProposed: 2, TypeAdjustmentApproved: 2, TypeAdjustmentRejected: 2,
	TypePersonalDataErased: 2, TypeTokenRevoked: 2,
	TypePersonalDataErasureProposed: 1, TypePersonalDataErasureRejected: 1,
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
	case TypeSelfExcludedUntil:
		e = &SelfExcludedUntil{}
	case TypePlayerBanned:
		e = &PlayerBanned{}
	case TypeBanLifted:
		e = &BanLifted{}
	case TypeSettingsAdopted:
		e = &SettingsAdopted{}
	case TypeSalesSuspended:
		e = &SalesSuspended{}
	case TypeSalesResumed:
		e = &SalesResumed{}
	case TypeAccountClosed:
		e = &AccountClosed{}
	case TypeAccountReopened:
		e = &AccountReopened{}
	case TypeSeedsResealed:
		e = &SeedsResealed{}
	case TypeAdjustmentProposed:
		e = &AdjustmentProposed{}
	case TypeAdjustmentApproved:
		e = &AdjustmentApproved{}
	case TypeAdjustmentRejected:
		e = &AdjustmentRejected{}
	case TypePersonalDataErasureProposed:
		e = &PersonalDataErasureProposed{}
	case TypePersonalDataErased:
		e = &PersonalDataErased{}
	case TypePersonalDataErasureRejected:
		e = &PersonalDataErasureRejected{}
	case TypeTokenRevoked:
		e = &TokenRevoked{}
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

// Actor is who gave a command: the role and the subject of the token the
// API verified. Events of operator, finance and regulator commands carry
// it; the system's own commands (a play completed, a sold-out block
// closed) carry none.
type Actor struct {
	Role    string `json:"role"`
	Subject string `json:"subject"`
}

// Roles an Actor may have, as the API's tokens name them.
const (
	RolePlayer    = "player"
	RoleOperator  = "operator"
	RoleFinance   = "finance"
	RoleRegulator = "regulator"
)

// subjectPattern bounds a token's subject: a person's or a service's login,
// never free text.
var subjectPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$`)

// ValidSubject reports whether s can name who gave a command.
func ValidSubject(s string) bool { return subjectPattern.MatchString(s) }

// ValidStaffSubject reports whether s can name a staff member who gave a
// command, as the stream holds it: in clear, or sealed (SealedPrefix).
func ValidStaffSubject(s string) bool { return ValidSubject(s) || SealedKeyID(s) != "" }

// validActor checks an actor a command carries (nil: the system).
func validActor(a *Actor) error {
	if a == nil {
		return nil
	}
	switch a.Role {
	case RolePlayer, RoleOperator, RoleFinance, RoleRegulator:
	default:
		return refuse(CodeInvalidRequest, "actor role %q: want player, operator, finance or regulator", a.Role)
	}
	if !ValidSubject(a.Subject) && (a.Role == RolePlayer || !ValidStaffSubject(a.Subject)) {
		return badSubject("actor subject", a.Subject)
	}
	return nil
}

// Staff reports whether an actor acts for the operator (not the player,
// not the system): what makes an exclusion "recorded by the operator".
func (a *Actor) Staff() bool { return a != nil && a.Role != RolePlayer }

// AccountOpened records a new player account, with a zero balance. By is
// who opened it (schema 2).
type AccountOpened struct {
	Player string `json:"player"`
	By     *Actor `json:"by,omitempty"`
}

// LimitKind names a responsible-gaming limit.
type LimitKind string

// The two weekly limits French rules require before a first deposit and a
// first stake.
const (
	DepositLimit LimitKind = "deposit"
	StakeLimit   LimitKind = "stake"
)

// LimitChanged records a limit over a rolling period set, lowered or
// raised. A lowering takes effect at once (EffectiveAt is the event's
// time); a raise takes effect after the settings' delay, and until then the
// old limit holds. PeriodDays (schema 2) is the limit's period; a schema 1
// event, which has none, is a weekly limit (Period).
type LimitChanged struct {
	Player      string    `json:"player"`
	Kind        LimitKind `json:"kind"`
	Limit       Amount    `json:"limit"`
	EffectiveAt time.Time `json:"effective_at"`
	PeriodDays  int       `json:"period_days,omitempty"`
	By          *Actor    `json:"by,omitempty"`
}

// Period returns the limit's period in days.
func (e *LimitChanged) Period() int {
	if e.PeriodDays == 0 {
		return LegacyLimitPeriodDays
	}
	return e.PeriodDays
}

// SelfExcluded records that a player is excluded from play for good: the
// account can no longer stake or deposit. It is not reversed by Tresor. By
// and Reason (schema 2) say who recorded it and, for an exclusion recorded
// by the operator, why.
type SelfExcluded struct {
	Player string `json:"player"`
	By     *Actor `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// SelfExcludedUntil records a self-exclusion for a term: from the event's
// time until Until, the account can neither stake nor deposit. A later one
// only ever extends the term; the term ends by itself at Until.
type SelfExcludedUntil struct {
	Player string    `json:"player"`
	Until  time.Time `json:"until"`
	By     *Actor    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// PlayerBanned records a ban of a player by a decision outside Tresor (a
// national or an operator's ban list): until it is lifted, the account can
// neither stake nor deposit. Ban is its id among the player's bans;
// Reference names the decision.
type PlayerBanned struct {
	Player    string `json:"player"`
	Ban       string `json:"ban"`
	Reference string `json:"reference"`
	Reason    string `json:"reason"`
	By        *Actor `json:"by,omitempty"`
}

// BanLifted records the end of a ban, by the decision Reference names.
type BanLifted struct {
	Player    string `json:"player"`
	Ban       string `json:"ban"`
	Reference string `json:"reference"`
	Reason    string `json:"reason"`
	By        *Actor `json:"by,omitempty"`
}

// SettingsAdopted records the jurisdiction settings every later decision
// is made under, until the next one. A stream without one was decided
// under BaselineSettings.
type SettingsAdopted struct {
	Settings
}

// SeedsResealed records that the sealed seeds of blocks not yet closed are
// sealed again under a new master key (MasterKeyID names it without
// revealing it): from here on, a writer holding only that key reopens
// them, and the old key can be destroyed. The seeds stay secret: only
// their sealed form changes.
type SeedsResealed struct {
	MasterKeyID string         `json:"master_key_id"`
	Seeds       []ResealedSeed `json:"seeds"`
}

// ResealedSeed is one block's seed sealed under the new master key.
type ResealedSeed struct {
	Block      string `json:"block"`
	SealedSeed []byte `json:"sealed_seed"`
}

// FundsDeposited records money paid into a player's account.
// By (schema 2) is who recorded it.
type FundsDeposited struct {
	Player  string `json:"player"`
	Amount  Amount `json:"amount"`
	Key     string `json:"idempotency_key"`
	Balance Amount `json:"balance_after"`
	By      *Actor `json:"by,omitempty"`
}

// FundsWithdrawn records money paid out of a player's account. By (schema
// 2) is who recorded it.
type FundsWithdrawn struct {
	Player  string `json:"player"`
	Amount  Amount `json:"amount"`
	Key     string `json:"idempotency_key"`
	Balance Amount `json:"balance_after"`
	By      *Actor `json:"by,omitempty"`
}

// EmissionCreated records an emission of Blocks blocks of one price. Key is
// the operator's idempotency key (schema 2; absent in schema 1 and when the
// request carried none). By (schema 3) is who created it.
type EmissionCreated struct {
	Emission     string `json:"emission"`
	Price        Amount `json:"price"`
	Blocks       int    `json:"blocks"`
	RulesVersion string `json:"rules_version"`
	Key          string `json:"idempotency_key,omitempty"`
	By           *Actor `json:"by,omitempty"`
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
// the deck, check it against the commitment, and recompute every play. By
// and Reason (schema 2) say who closed it and why: none when the writer
// closed a sold-out block, a reason when an operator closed a block early.
type BlockClosed struct {
	Block  string `json:"block"`
	Seed   Seed   `json:"seed"`
	Sold   int    `json:"sold"`
	By     *Actor `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
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

// UnmarshalJSON reads an UnitAssigned and refuses one without its proof,
// whose tier would otherwise be the tier whose code is zero.
func (e *UnitAssigned) UnmarshalJSON(b []byte) error {
	type fields UnitAssigned // without this method
	var v struct {
		fields
		Proof *UnitProof `json:"proof"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Proof == nil {
		return fmt.Errorf("play %s: unit assigned without its proof", v.Play)
	}
	*e = UnitAssigned(v.fields)
	e.Proof = *v.Proof
	return nil
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

// UnmarshalJSON reads a PlaySettled and refuses one without its tier
// (absent or null): read as the tier whose code is zero, it would be the
// best prize.
func (e *PlaySettled) UnmarshalJSON(b []byte) error {
	type fields PlaySettled // without this method
	var v struct {
		fields
		Tier *Tier `json:"tier"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Tier == nil {
		return fmt.Errorf("play %s: settled without a tier", v.Play)
	}
	*e = PlaySettled(v.fields)
	e.Tier = *v.Tier
	return nil
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
func (*AccountOpened) EventType() string     { return TypeAccountOpened }
func (*LimitChanged) EventType() string      { return TypeLimitChanged }
func (*SelfExcluded) EventType() string      { return TypeSelfExcluded }
func (*FundsDeposited) EventType() string    { return TypeFundsDeposited }
func (*FundsWithdrawn) EventType() string    { return TypeFundsWithdrawn }
func (*EmissionCreated) EventType() string   { return TypeEmissionCreated }
func (*BlockOpened) EventType() string       { return TypeBlockOpened }
func (*BlockExhausted) EventType() string    { return TypeBlockExhausted }
func (*BlockClosed) EventType() string       { return TypeBlockClosed }
func (*StakePlaced) EventType() string       { return TypeStakePlaced }
func (*UnitAssigned) EventType() string      { return TypeUnitAssigned }
func (*ThrowMade) EventType() string         { return TypeThrowMade }
func (*PlaySettled) EventType() string       { return TypePlaySettled }
func (*PrizePaid) EventType() string         { return TypePrizePaid }
func (*SelfExcludedUntil) EventType() string { return TypeSelfExcludedUntil }
func (*PlayerBanned) EventType() string      { return TypePlayerBanned }
func (*BanLifted) EventType() string         { return TypeBanLifted }
func (*SettingsAdopted) EventType() string   { return TypeSettingsAdopted }
func (*SeedsResealed) EventType() string     { return TypeSeedsResealed }

// AggregateID implementations: player facts on the player, block facts on
// the block, emission facts on the emission.
func (e *AccountOpened) AggregateID() string     { return playerAggregate(e.Player) }
func (e *LimitChanged) AggregateID() string      { return playerAggregate(e.Player) }
func (e *SelfExcluded) AggregateID() string      { return playerAggregate(e.Player) }
func (e *FundsDeposited) AggregateID() string    { return playerAggregate(e.Player) }
func (e *FundsWithdrawn) AggregateID() string    { return playerAggregate(e.Player) }
func (e *EmissionCreated) AggregateID() string   { return "emission." + e.Emission }
func (e *BlockOpened) AggregateID() string       { return blockAggregate(e.Block) }
func (e *BlockExhausted) AggregateID() string    { return blockAggregate(e.Block) }
func (e *BlockClosed) AggregateID() string       { return blockAggregate(e.Block) }
func (e *StakePlaced) AggregateID() string       { return playerAggregate(e.Player) }
func (e *UnitAssigned) AggregateID() string      { return playerAggregate(e.Player) }
func (e *ThrowMade) AggregateID() string         { return playerAggregate(e.Player) }
func (e *PlaySettled) AggregateID() string       { return playerAggregate(e.Player) }
func (e *PrizePaid) AggregateID() string         { return playerAggregate(e.Player) }
func (e *SelfExcludedUntil) AggregateID() string { return playerAggregate(e.Player) }
func (e *PlayerBanned) AggregateID() string      { return playerAggregate(e.Player) }
func (e *BanLifted) AggregateID() string         { return playerAggregate(e.Player) }
func (e *SettingsAdopted) AggregateID() string   { return "settings." + e.Version }
func (e *SeedsResealed) AggregateID() string     { return "master-key." + e.MasterKeyID }

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
// events, one for deposits, withdrawals, stakes, prizes and approved
// adjustments. The journal of
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
	case *AdjustmentApproved:
		return adjustmentPostings(e)
	}
	return nil
}
