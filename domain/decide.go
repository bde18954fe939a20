package domain

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Command is a request to the write side. Decide checks it against the
// ledger and returns the events that record it, or a refusal that records
// nothing.
type Command interface{ command() }

// ConfigureAccount opens a player's account if it does not exist and applies
// the settings given: weekly limits (nil leaves one unchanged) and
// self-exclusion. SelfExcluded excludes the player; LiftSelfExclusion asks
// for an exclusion to be lifted, which Tresor refuses. Neither set leaves the
// exclusion as it is, so that a limit can be lowered on an excluded account.
type ConfigureAccount struct {
	Player            string
	DepositLimit      *Amount
	StakeLimit        *Amount
	SelfExcluded      bool
	LiftSelfExclusion bool
}

// Deposit pays money into an account; Key makes retries safe.
type Deposit struct {
	Player string
	Amount Amount
	Key    string
}

// Withdraw pays money out of an account; Key makes retries safe.
type Withdraw struct {
	Player string
	Amount Amount
	Key    string
}

// CreateEmission creates an emission of Blocks blocks at Price and opens its
// first block (or queues it behind an earlier emission of the same price).
// First is the block prepared for it. Key, when set, makes retries safe: a
// retry answers the emission the key first created.
type CreateEmission struct {
	Price  Amount
	Blocks int
	Key    string
	First  *PreparedBlock
}

// PlaceStake is the player's « Jouer » (Article 4.2): debit the stake and
// assign the next unit of the open block of that price.
type PlaceStake struct {
	Player string
	Stake  Amount
	Key    string
}

// MakeThrow is the player's « Lancer » (Article 4.4) on a play in progress.
// Throw names the throw it makes (1 to ThrowCount), so that a retry of a
// throw already made answers that throw again instead of making the next;
// 0 makes the next throw, whichever it is (requests that predate the field).
type MakeThrow struct {
	Player string
	Play   string
	Throw  int
}

// CompletePlay makes the remaining throws of an abandoned play on behalf of
// its player and settles it: a win is never lost.
type CompletePlay struct{ Play string }

// CloseBlock ends a block and reveals its seed. An open block is taken off
// sale; plays still in progress on it must settle first. Closing a closed
// block records nothing and is not an error, so that a retry is safe.
type CloseBlock struct {
	Block string
	Seed  Seed
}

func (ConfigureAccount) command() {}
func (Deposit) command()          {}
func (Withdraw) command()         {}
func (CreateEmission) command()   {}
func (PlaceStake) command()       {}
func (MakeThrow) command()        {}
func (CompletePlay) command()     {}
func (CloseBlock) command()       {}

// Decision is what Decide returns for an accepted command: the events to
// record, or, for a retry of a command already recorded (a remembered
// client key, a throw already made), the first result and no events.
type Decision struct {
	Events []Event
	Replay *KeyRecord
}

// EmissionBlocksMax bounds the blocks of one emission.
const EmissionBlocksMax = 1000

// idPattern is the shape of player ids: they become part of NATS subjects
// and URLs, so they are restricted to letters, digits, '-' and '_'.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// keyPattern bounds client idempotency keys.
var keyPattern = regexp.MustCompile(`^[\x21-\x7e]{1,128}$`)

// ValidID reports whether s can name a player, a play or a block.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// Decide checks a command against the ledger at time now and returns the
// events that record it. It never changes the ledger's state (it may attach
// the deck of a block it opens, which is not state): the caller applies
// the events with Evolve once they are durable (or speculatively, in order,
// while they commit). A refusal is an *Error with a stable code.
func Decide(l *Ledger, now time.Time, c Command) (Decision, error) {
	switch c := c.(type) {
	case ConfigureAccount:
		return l.configure(now, c)
	case Deposit:
		return l.deposit(now, c)
	case Withdraw:
		return l.withdraw(c)
	case CreateEmission:
		return l.createEmission(c)
	case PlaceStake:
		return l.placeStake(now, c)
	case MakeThrow:
		return l.makeThrow(c)
	case CompletePlay:
		return l.completePlay(c)
	case CloseBlock:
		return l.closeBlock(c)
	}
	return Decision{}, refuse(CodeInvalidRequest, "unknown command %T", c)
}

func (l *Ledger) configure(now time.Time, c ConfigureAccount) (Decision, error) {
	if !ValidID(c.Player) {
		return Decision{}, refuse(CodeInvalidRequest, "player id %q: want 1 to 64 letters, digits, '-' or '_'", c.Player)
	}
	var evs []Event
	a := l.Accounts[c.Player]
	if a == nil {
		evs = append(evs, &AccountOpened{Player: c.Player})
	}
	for _, lc := range []struct {
		kind  LimitKind
		value *Amount
	}{{DepositLimit, c.DepositLimit}, {StakeLimit, c.StakeLimit}} {
		if lc.value == nil {
			continue
		}
		if *lc.value <= 0 || *lc.value > AmountMax {
			return Decision{}, refuse(CodeInvalidRequest, "weekly %s limit %s: must be positive", lc.kind, *lc.value)
		}
		var cur *Limit
		if a != nil {
			cur = a.Limits[lc.kind]
		}
		switch {
		case cur == nil || *lc.value < cur.At(now):
			evs = append(evs, &LimitChanged{Player: c.Player, Kind: lc.kind, Limit: *lc.value, EffectiveAt: now})
		case *lc.value == cur.At(now) && !cur.pendingPresent:
			// Unchanged: nothing to record.
		case *lc.value == cur.At(now):
			// Back to the limit in force: cancels the pending raise at once.
			evs = append(evs, &LimitChanged{Player: c.Player, Kind: lc.kind, Limit: *lc.value, EffectiveAt: now})
		case cur.pendingPresent && *lc.value == cur.Pending:
			// The same raise again: it keeps its original date.
		default:
			evs = append(evs, &LimitChanged{Player: c.Player, Kind: lc.kind, Limit: *lc.value, EffectiveAt: now.Add(LimitRaiseDelay)})
		}
	}
	if c.SelfExcluded && c.LiftSelfExclusion {
		return Decision{}, refuse(CodeInvalidRequest, "a request cannot both set and lift a self-exclusion")
	}
	if c.LiftSelfExclusion && a != nil && a.SelfExcluded {
		return Decision{}, refuse(CodeConflict, "player %s is self-excluded; Tresor does not lift a self-exclusion", c.Player)
	}
	if c.SelfExcluded && (a == nil || !a.SelfExcluded) {
		evs = append(evs, &SelfExcluded{Player: c.Player})
	}
	return Decision{Events: evs}, nil
}

// replay checks a client key in its scope (the player and the kind of
// command): a remembered key with the same request returns its first
// result; with another request it is a conflict. The refusal does not
// say what the first request was: the key may have been another client's.
func (l *Ledger) replay(player string, kind KeyKind, key, request string) (*KeyRecord, error) {
	if !keyPattern.MatchString(key) {
		return nil, refuse(CodeInvalidRequest, "idempotency key: want 1 to 128 printable ASCII characters")
	}
	r := l.Key(player, kind, key)
	if r == nil {
		return nil, nil
	}
	if r.Request != request {
		return nil, refuse(CodeConflict, "idempotency key %q was already used for a different %s request", key, kind)
	}
	return r, nil
}

// liveAccount returns an account or not_found.
func (l *Ledger) liveAccount(player string) (*Account, error) {
	a := l.Accounts[player]
	if a == nil {
		return nil, refuse(CodeNotFound, "no account for player %q", player)
	}
	return a, nil
}

func checkAmount(what string, a Amount) error {
	if a <= 0 || a > AmountMax {
		return refuse(CodeInvalidRequest, "%s %s: must be positive and at most %s", what, a, AmountMax)
	}
	return nil
}

func (l *Ledger) deposit(now time.Time, c Deposit) (Decision, error) {
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if r, err := l.replay(c.Player, KeyDeposit, c.Key, amountRequest(c.Amount)); err != nil || r != nil {
		return Decision{Replay: r}, err
	}
	if err := checkAmount("deposit", c.Amount); err != nil {
		return Decision{}, err
	}
	if a.SelfExcluded {
		return Decision{}, refuse(CodeSelfExcluded, "player %s is self-excluded: deposits are refused, withdrawals stay open", c.Player)
	}
	lim := a.Limits[DepositLimit]
	if lim == nil {
		return Decision{}, refuse(CodeLimitExceeded, "set a weekly deposit limit before the first deposit")
	}
	if used, max := a.deposits.total(now), lim.At(now); used+c.Amount > max {
		return Decision{}, refuse(CodeLimitExceeded, "deposit of %s would bring the last 7 days' deposits to %s, above the weekly limit of %s", c.Amount, used+c.Amount, max)
	}
	return Decision{Events: []Event{&FundsDeposited{Player: c.Player, Amount: c.Amount, Key: c.Key, Balance: a.Balance + c.Amount}}}, nil
}

func (l *Ledger) withdraw(c Withdraw) (Decision, error) {
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if r, err := l.replay(c.Player, KeyWithdrawal, c.Key, amountRequest(c.Amount)); err != nil || r != nil {
		return Decision{Replay: r}, err
	}
	if err := checkAmount("withdrawal", c.Amount); err != nil {
		return Decision{}, err
	}
	if c.Amount > a.Balance {
		return Decision{}, refuse(CodeInsufficientFunds, "withdrawal of %s is more than the balance of %s", c.Amount, a.Balance)
	}
	return Decision{Events: []Event{&FundsWithdrawn{Player: c.Player, Amount: c.Amount, Key: c.Key, Balance: a.Balance - c.Amount}}}, nil
}

func (l *Ledger) createEmission(c CreateEmission) (Decision, error) {
	if _, err := l.Rules.Table(c.Price); err != nil {
		return Decision{}, refuse(CodeInvalidStake, "%v", err)
	}
	if c.Blocks < 1 || c.Blocks > EmissionBlocksMax {
		return Decision{}, refuse(CodeInvalidRequest, "an emission has 1 to %d blocks, not %d", EmissionBlocksMax, c.Blocks)
	}
	if c.Key != "" {
		if r, err := l.replay("", KeyEmission, c.Key, emissionRequest(c.Price, c.Blocks)); err != nil || r != nil {
			return Decision{Replay: r}, err
		}
	}
	id := fmt.Sprintf("E%04d", len(l.emissionOrder)+1)
	evs := []Event{&EmissionCreated{Emission: id, Price: c.Price, Blocks: c.Blocks, RulesVersion: l.Rules.Version, Key: c.Key}}
	if l.OpenBlock(c.Price) == nil {
		if c.First == nil {
			return Decision{}, refuse(CodeInternal, "emission %s: no prepared block to open", id)
		}
		// The deck is secret material, not state: attaching it changes no
		// decision until the BlockOpened below is applied.
		l.AttachDeck(c.First.Deck)
		evs = append(evs, l.blockOpened(&Emission{ID: id, Price: c.Price, Blocks: c.Blocks}, c.First))
	}
	return Decision{Events: evs}, nil
}

// blockOpened builds the BlockOpened of an emission's next block.
func (l *Ledger) blockOpened(e *Emission, p *PreparedBlock) *BlockOpened {
	return &BlockOpened{
		Block: blockID(e.ID, e.Opened+1), Emission: e.ID, Index: e.Opened + 1,
		Price: e.Price, Commitment: p.Deck.Commitment, SealedSeed: p.SealedSeed,
	}
}

// blockID names the index-th block of an emission (from 1).
func blockID(emission string, index int) string { return fmt.Sprintf("%s-B%03d", emission, index) }

// nextBlock returns the BlockOpened for the next block of a price, if an
// emission has one left and it is prepared.
func (l *Ledger) nextBlock(price Amount) *BlockOpened {
	for _, id := range l.emissionOrder {
		e := l.Emissions[id]
		if e.Price != price || e.Opened >= e.Blocks {
			continue
		}
		p := l.prepared[id]
		if p == nil {
			return nil
		}
		opened := *e
		return l.blockOpened(&opened, p)
	}
	return nil
}

func (l *Ledger) placeStake(now time.Time, c PlaceStake) (Decision, error) {
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if r, err := l.replay(c.Player, KeyStake, c.Key, amountRequest(c.Stake)); err != nil || r != nil {
		return Decision{Replay: r}, err
	}
	table, err := l.Rules.Table(c.Stake)
	if err != nil {
		return Decision{}, refuse(CodeInvalidStake, "stake %s: %v", c.Stake, err)
	}
	if a.SelfExcluded {
		return Decision{}, refuse(CodeSelfExcluded, "player %s is self-excluded", c.Player)
	}
	lim := a.Limits[StakeLimit]
	if lim == nil {
		return Decision{}, refuse(CodeLimitExceeded, "set a weekly stake limit before the first stake")
	}
	if used, max := a.stakes.total(now), lim.At(now); used+c.Stake > max {
		return Decision{}, refuse(CodeLimitExceeded, "stake of %s would bring the last 7 days' stakes to %s, above the weekly limit of %s", c.Stake, used+c.Stake, max)
	}
	if c.Stake > a.Balance {
		return Decision{}, refuse(CodeInsufficientFunds, "stake of %s is more than the balance of %s", c.Stake, a.Balance)
	}
	b := l.OpenBlock(c.Stake)
	if b == nil {
		return Decision{}, refuse(CodeNoOpenBlock, "no block of %s units is on sale", c.Stake)
	}
	deck := l.DeckOf(b)
	if deck == nil {
		return Decision{}, refuse(CodeInternal, "block %s: deck not loaded", b.ID)
	}
	unit := uint32(b.Sold)
	play := PlayID(b.ID, unit)
	evs := []Event{
		&StakePlaced{Play: play, Player: c.Player, Block: b.ID, Stake: c.Stake, Key: c.Key, Balance: a.Balance - c.Stake},
		&UnitAssigned{Play: play, Player: c.Player, Block: b.ID, Proof: deck.Proof(unit)},
	}
	if b.Sold+1 == l.Rules.BlockUnits {
		evs = append(evs, &BlockExhausted{Block: b.ID})
		if next := l.nextBlock(table.Price); next != nil {
			evs = append(evs, next)
		}
	}
	return Decision{Events: evs}, nil
}

// PlayID names the play of a block's unit: plays are numbered by the unit
// they bought, so an id tells its block and unit without a lookup.
func PlayID(block string, unit uint32) string { return fmt.Sprintf("%s-U%06d", block, unit) }

// ParsePlayID reads the block and unit out of a play id.
func ParsePlayID(id string) (block string, unit uint32, ok bool) {
	i := strings.LastIndex(id, "-U")
	if i <= 0 || len(id)-i-2 != 6 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(id[i+2:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return id[:i], uint32(n), true
}

// BlockEmission reads the emission out of a block id: a block is named
// after its emission and its index in it ("E0001-B002", see blockOpened),
// so an id tells its emission without a lookup.
func BlockEmission(block string) (emission string, ok bool) {
	i := strings.LastIndex(block, "-B")
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(block[i+2:], 10, 32); err != nil {
		return "", false
	}
	return block[:i], true
}

// livePlay returns a play in progress of the player. A play of the player
// that is over is play_finished; a play of another player, or no play at
// all, is not_found, so nothing tells whether another player's play exists.
func (l *Ledger) livePlay(player, id string) (*Play, error) {
	p := l.Plays[id]
	if p != nil && (player == "" || p.Player == player) {
		return p, nil
	}
	if p == nil && l.PlayOwner(id) == player && player != "" {
		return nil, refuse(CodePlayFinished, "play %s is over: its four throws are made and it is settled", id)
	}
	return nil, refuse(CodeNotFound, "no play %q for player %q", id, player)
}

func (l *Ledger) makeThrow(c MakeThrow) (Decision, error) {
	if c.Throw < 0 || c.Throw > ThrowCount {
		return Decision{}, refuse(CodeInvalidRequest, "throw %d: want 1 to %d", c.Throw, ThrowCount)
	}
	p, err := l.livePlay(c.Player, c.Play)
	if c.Throw > 0 && errors.Is(err, ErrPlayFinished) {
		// All four throws are made: throw n is one of them.
		return Decision{Replay: &KeyRecord{Play: c.Play, Throw: c.Throw}}, nil
	}
	if err != nil {
		return Decision{}, err
	}
	switch {
	case c.Throw > 0 && c.Throw <= p.Throws:
		return Decision{Replay: &KeyRecord{Play: p.ID, Throw: c.Throw}}, nil
	case c.Throw > p.Throws+1:
		return Decision{}, refuse(CodeThrowOutOfTurn, "play %s has %d throws made: the next is throw %d, not %d", p.ID, p.Throws, p.Throws+1, c.Throw)
	}
	evs, err := l.throws(p, 1, false)
	return Decision{Events: evs}, err
}

func (l *Ledger) completePlay(c CompletePlay) (Decision, error) {
	p, err := l.livePlay("", c.Play)
	if err != nil {
		return Decision{}, err
	}
	evs, err := l.throws(p, ThrowCount-p.Throws, true)
	return Decision{Events: evs}, err
}

// throws records the next n throws of a play and, after the fourth, its
// settlement and prize.
func (l *Ledger) throws(p *Play, n int, bySystem bool) ([]Event, error) {
	results, err := p.throwResults()
	if err != nil {
		// The scenario was generated for this tier and validated by tests;
		// an error here means the code changed under a live play.
		return nil, refuse(CodeInternal, "play %s: scenario does not replay: %v", p.ID, err)
	}
	var evs []Event
	for i := p.Throws; i < p.Throws+n && i < ThrowCount; i++ {
		evs = append(evs, &ThrowMade{Play: p.ID, Player: p.Player, Throw: i + 1, Result: results[i], BySystem: bySystem})
	}
	if p.Throws+len(evs) == ThrowCount {
		table, _ := l.Rules.Table(p.Stake)
		prize := table.Prize(p.Tier)
		evs = append(evs, &PlaySettled{Play: p.ID, Player: p.Player, Block: p.Block, Unit: p.Unit, Tier: p.Tier, Prize: prize, BySystem: bySystem})
		if prize > 0 {
			a := l.Accounts[p.Player]
			evs = append(evs, &PrizePaid{Play: p.ID, Player: p.Player, Block: p.Block, Amount: prize, Balance: a.Balance + prize})
		}
	}
	return evs, nil
}

func (l *Ledger) closeBlock(c CloseBlock) (Decision, error) {
	b := l.Blocks[c.Block]
	if b == nil {
		return Decision{}, refuse(CodeNotFound, "no block %q", c.Block)
	}
	if b.State == BlockStateClosed {
		// Already closed, by this command's first try or by the sweep:
		// nothing to record, and the answer is the closed block.
		return Decision{}, nil
	}
	if b.InPlay > 0 {
		return Decision{}, refuse(CodeConflict, "block %s has %d plays in progress; they settle first", b.ID, b.InPlay)
	}
	if c.Seed.Hash() != b.Commitment.SeedHash {
		return Decision{}, refuse(CodeInternal, "block %s: the seed does not match the commitment", b.ID)
	}
	evs := []Event{&BlockClosed{Block: b.ID, Seed: c.Seed, Sold: b.Sold}}
	if b.State == BlockStateOpen {
		if next := l.nextBlock(b.Price); next != nil {
			evs = append(evs, next)
		}
	}
	return Decision{Events: evs}, nil
}
