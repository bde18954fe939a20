package domain

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Command is a request to the write side. Decide checks it against the
// ledger and returns the events that record it, or a refusal that records
// nothing.
type Command interface{ command() }

// ConfigureAccount opens a player's account if it does not exist and applies
// the settings given: limits (nil or absent leaves one unchanged) and
// self-exclusion. DepositLimit and StakeLimit are the weekly (7-day) limits;
// Limits sets limits of any period the settings offer. SelfExcluded
// excludes the player for good, SelfExcludedUntil until a time (a term is
// extended, never shortened); LiftSelfExclusion asks for an exclusion to be
// lifted, which Tresor refuses while one is in force. None of them set
// leaves the exclusion as it is, so that a limit can be lowered on an
// excluded account. By is who asks: a player acts on their own account only
// and opens none; an exclusion asked by the operator's staff needs a
// Reason.
type ConfigureAccount struct {
	Player            string
	DepositLimit      *Amount
	StakeLimit        *Amount
	Limits            []LimitSetting
	SelfExcluded      bool
	SelfExcludedUntil *time.Time
	LiftSelfExclusion bool
	By                *Actor
	Reason            string
}

// LimitSetting is one limit a ConfigureAccount sets: a kind, a period the
// settings offer and an amount.
type LimitSetting struct {
	Kind       LimitKind
	PeriodDays int
	Amount     Amount
}

// LimitSettingsMax bounds the limits one ConfigureAccount sets.
const LimitSettingsMax = 2 * LimitPeriodsMax

// Deposit pays money into an account; Key makes retries safe. By is who
// records it.
type Deposit struct {
	Player string
	Amount Amount
	Key    string
	By     *Actor
}

// Withdraw pays money out of an account; Key makes retries safe. By is who
// records it.
type Withdraw struct {
	Player string
	Amount Amount
	Key    string
	By     *Actor
}

// BanPlayer records a ban of a player decided outside Tresor: Reference
// names the decision, Reason says why. Asked again with a reference in
// force, it answers that ban and records nothing.
type BanPlayer struct {
	Player, Reference, Reason string
	By                        *Actor
}

// LiftBan ends a ban in force, by the decision Reference names. Lifting a
// ban already lifted answers it and records nothing.
type LiftBan struct {
	Player, Ban, Reference, Reason string
	By                             *Actor
}

// AdoptSettings records the jurisdiction settings later decisions are made
// under; the settings in force already record nothing.
type AdoptSettings struct {
	Settings Settings
}

// ResealSeeds records the seeds of blocks not yet closed sealed again
// under a new master key: the writer seals them (the decider never holds a
// key) and names the key by MasterKeyID. Blocks closed since are left out:
// their seed is public.
type ResealSeeds struct {
	MasterKeyID string
	Seeds       []ResealedSeed
}

// ResealSeedsMax bounds the seeds of one ResealSeeds: one append.
const ResealSeedsMax = 500

// masterKeyIDPattern is the shape of a master key's id: 16 hex digits.
var masterKeyIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// CreateEmission creates an emission of Blocks blocks at Price and opens its
// first block (or queues it behind an earlier emission of the same price).
// First is the block prepared for it. Key, when set, makes retries safe: a
// retry answers the emission the key first created.
type CreateEmission struct {
	Price  Amount
	Blocks int
	Key    string
	First  *PreparedBlock
	By     *Actor
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
// block records nothing and is not an error, so that a retry is safe. By is
// who asks (nil for the writer's own close of a sold-out block); closing an
// open block early needs a Reason.
type CloseBlock struct {
	Block  string
	Seed   Seed
	By     *Actor
	Reason string
}

func (ConfigureAccount) command() {}
func (Deposit) command()          {}
func (Withdraw) command()         {}
func (CreateEmission) command()   {}
func (PlaceStake) command()       {}
func (MakeThrow) command()        {}
func (CompletePlay) command()     {}
func (CloseBlock) command()       {}
func (BanPlayer) command()        {}
func (LiftBan) command()          {}
func (AdoptSettings) command()    {}
func (ResealSeeds) command()      {}

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
	case BanPlayer:
		return l.ban(c)
	case LiftBan:
		return l.liftBan(c)
	case AdoptSettings:
		return l.adoptSettings(c)
	case SuspendSales:
		return l.suspendSales(c)
	case ResumeSales:
		return l.resumeSales(c)
	case CloseAccount:
		return l.closeAccount(c)
	case ReopenAccount:
		return l.reopenAccount(c)
	case ResealSeeds:
		return l.resealSeeds(c)
	case ProposeAdjustment:
		return l.proposeAdjustment(now, c)
	case ApproveAdjustment:
		return l.approveAdjustment(now, c)
	case RejectAdjustment:
		return l.rejectAdjustment(now, c)
	case ErasePersonalData:
		return l.erase(now, c)
	case ApproveErasure:
		return l.approveErasure(now, c)
	case RejectErasure:
		return l.rejectErasure(now, c)
	case RevokeTokens:
		return l.revokeTokens(c)
	}
	return Decision{}, refuse(CodeInvalidRequest, "unknown command %T", c)
}

func (l *Ledger) configure(now time.Time, c ConfigureAccount) (Decision, error) {
	if !ValidID(c.Player) {
		return Decision{}, refuse(CodeInvalidRequest, "player id %q: want 1 to 64 letters, digits, '-' or '_'", c.Player)
	}
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if err := validText("reason", c.Reason, ReasonMax, false); err != nil {
		return Decision{}, err
	}
	var evs []Event
	a := l.Accounts[c.Player]
	if a == nil {
		if c.By != nil && c.By.Role == RolePlayer {
			return Decision{}, refuse(CodeNotFound, "no account for player %q: the operator opens it", c.Player)
		}
		evs = append(evs, &AccountOpened{Player: c.Player, By: c.By})
	}
	if a != nil {
		if err := l.openAccount(a, "a change of its limits or exclusions is"); err != nil {
			return Decision{}, err
		}
	}
	limits, err := l.limitChanges(now, a, c)
	if err != nil {
		return Decision{}, err
	}
	evs = append(evs, limits...)
	excl, err := l.exclusionChanges(now, a, c)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Events: append(evs, excl...)}, nil
}

// limitChanges decides the limits a ConfigureAccount sets: a first limit or
// a lowering at once, a raise after the settings' delay. A limit's period
// must be offered by the settings in force, but for lowering one set under
// earlier settings: a player's protection never depends on the period
// still being offered.
func (l *Ledger) limitChanges(now time.Time, a *Account, c ConfigureAccount) ([]Event, error) {
	asked := make([]LimitSetting, 0, 2+len(c.Limits))
	for _, w := range []struct {
		kind  LimitKind
		value *Amount
	}{{DepositLimit, c.DepositLimit}, {StakeLimit, c.StakeLimit}} {
		if w.value != nil {
			asked = append(asked, LimitSetting{Kind: w.kind, PeriodDays: LegacyLimitPeriodDays, Amount: *w.value})
		}
	}
	if len(c.Limits) > LimitSettingsMax {
		return nil, refuse(CodeInvalidRequest, "%d limits in one request: at most %d", len(c.Limits), LimitSettingsMax)
	}
	asked = append(asked, c.Limits...)
	seen := map[LimitKey]bool{}
	var evs []Event
	for _, ls := range asked {
		key := LimitKey{ls.Kind, ls.PeriodDays}
		name := periodName(ls.PeriodDays) + " " + string(ls.Kind) + " limit"
		switch {
		case ls.Kind != DepositLimit && ls.Kind != StakeLimit:
			return nil, refuse(CodeInvalidRequest, "limit kind %q: want deposit or stake", ls.Kind)
		case seen[key]:
			return nil, refuse(CodeInvalidRequest, "the %s is given twice", name)
		case ls.Amount <= 0 || ls.Amount > AmountMax:
			return nil, refuse(CodeInvalidRequest, "%s %s: must be positive", name, ls.Amount)
		}
		seen[key] = true
		var cur *Limit
		if a != nil {
			cur = a.Limits[key]
		}
		if !l.Settings.Offers(ls.PeriodDays) && (cur == nil || ls.Amount > cur.At(now)) {
			return nil, refuse(CodeInvalidRequest, "limits over %d days are not offered (periods offered: %s)", ls.PeriodDays, l.periodList())
		}
		change := &LimitChanged{Player: c.Player, Kind: ls.Kind, Limit: ls.Amount, EffectiveAt: now, PeriodDays: ls.PeriodDays, By: c.By}
		switch {
		case cur == nil || ls.Amount < cur.At(now):
		case ls.Amount == cur.At(now) && !cur.pendingPresent:
			continue // unchanged: nothing to record
		case ls.Amount == cur.At(now):
			// Back to the limit in force: cancels the pending raise at once.
		case cur.pendingPresent && ls.Amount == cur.Pending:
			continue // the same raise again: it keeps its original date
		default:
			change.EffectiveAt = now.Add(l.Settings.RaiseDelay())
		}
		evs = append(evs, change)
	}
	return evs, nil
}

// exclusionChanges decides the self-exclusions a ConfigureAccount asks for.
func (l *Ledger) exclusionChanges(now time.Time, a *Account, c ConfigureAccount) ([]Event, error) {
	asked := c.SelfExcluded || c.SelfExcludedUntil != nil
	switch {
	case asked && c.LiftSelfExclusion:
		return nil, refuse(CodeInvalidRequest, "a request cannot both set and lift a self-exclusion")
	case c.SelfExcluded && c.SelfExcludedUntil != nil:
		return nil, refuse(CodeInvalidRequest, "a self-exclusion is for good or until a time, not both")
	case asked && c.By.Staff() && c.Reason == "":
		return nil, refuse(CodeInvalidRequest, "reason required: an exclusion recorded by the operator says why")
	}
	if c.LiftSelfExclusion && a != nil {
		switch {
		case a.SelfExcluded:
			return nil, refuse(CodeConflict, "player %s is self-excluded; Tresor does not lift a self-exclusion", c.Player)
		case now.Before(a.ExcludedUntil):
			return nil, refuse(CodeConflict, "player %s is self-excluded until %s; a term is never lifted before its end", c.Player, a.ExcludedUntil.Format(time.RFC3339))
		}
	}
	if c.SelfExcluded && (a == nil || !a.SelfExcluded) {
		return []Event{&SelfExcluded{Player: c.Player, By: c.By, Reason: c.Reason}}, nil
	}
	if c.SelfExcludedUntil == nil {
		return nil, nil
	}
	until := c.SelfExcludedUntil.UTC().Truncate(time.Microsecond)
	earliest, latest := l.Settings.SelfExclusionRange(now)
	switch {
	case a != nil && a.SelfExcluded:
		return nil, refuse(CodeConflict, "player %s is self-excluded for good: a term adds nothing", c.Player)
	case until.Before(earliest) || until.After(latest):
		return nil, refuse(CodeInvalidRequest, "self-exclusion until %s: want %d hours to %d months from now (%s to %s)", until.Format(time.RFC3339),
			l.Settings.SelfExclusionMinHours, l.Settings.SelfExclusionMaxMonths, earliest.Format(time.RFC3339), latest.Format(time.RFC3339))
	case a != nil && now.Before(a.ExcludedUntil) && until.Before(a.ExcludedUntil):
		return nil, refuse(CodeConflict, "player %s is self-excluded until %s; a term is extended, never shortened", c.Player, a.ExcludedUntil.Format(time.RFC3339Nano))
	case a != nil && until.Equal(a.ExcludedUntil):
		return nil, nil // the same term again: nothing to record
	}
	return []Event{&SelfExcludedUntil{Player: c.Player, Until: until, By: c.By, Reason: c.Reason}}, nil
}

// periodName names a limit period for people: weekly, daily or N-day.
func periodName(days int) string {
	switch days {
	case 1:
		return "daily"
	case 7:
		return "weekly"
	}
	return strconv.Itoa(days) + "-day"
}

// periodList names the periods the settings offer, for messages.
func (l *Ledger) periodList() string {
	names := make([]string, len(l.Settings.LimitPeriodsDays))
	for i, d := range l.Settings.LimitPeriodsDays {
		names[i] = strconv.Itoa(d) + " days"
	}
	return strings.Join(names, ", ")
}

// Bounds of the free text a command carries.
const (
	// ReasonMax bounds a reason, in bytes.
	ReasonMax = 500
	// ReferenceMax bounds a decision's reference, in bytes.
	ReferenceMax = 128
)

// validText checks free text a command carries: at most max bytes of
// printable UTF-8 (no control character), required or not. Sealed text was
// checked in clear before it was sealed (SealCommand).
func validText(what, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return refuse(CodeInvalidRequest, "%s required", what)
	case SealedKeyID(s) != "":
		return nil
	case len(s) > max:
		return refuse(CodeInvalidRequest, "%s of %d bytes: at most %d", what, len(s), max)
	case !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0:
		return refuse(CodeInvalidRequest, "%s: want printable text, without control characters", what)
	case s != "" && strings.IndexFunc(s, visible) < 0:
		return refuse(CodeInvalidRequest, "%s: only blanks or invisible characters; want words", what)
	}
	return nil
}

// visible reports whether a character shows: neither a space nor a
// format character (a zero-width space, a direction mark), so that a text
// of such characters alone is not taken for a reason given.
func visible(r rune) bool { return !unicode.IsSpace(r) && !unicode.Is(unicode.Cf, r) }

// refusal returns why a stake or a deposit of the account is refused at
// now, whatever its amount: a self-exclusion (for good, or within its
// term), then a ban. Nil when there is none.
func (a *Account) refusal(now time.Time, what string) error {
	switch {
	case a.SelfExcluded:
		return refuse(CodeSelfExcluded, "player %s is self-excluded: %s refused, withdrawals stay open", a.Player, what)
	case now.Before(a.ExcludedUntil):
		return refuse(CodeSelfExcluded, "player %s is self-excluded until %s: %s refused, withdrawals stay open", a.Player, a.ExcludedUntil.Format(time.RFC3339Nano), what)
	case len(a.Bans) > 0:
		refs := make([]string, 0, len(a.Bans))
		for _, b := range a.Bans {
			refs = append(refs, b.ID+" ("+b.Reference+")")
		}
		slices.Sort(refs)
		return refuse(CodeBanned, "player %s is banned by %s: %s refused, withdrawals stay open", a.Player, strings.Join(refs, ", "), what)
	}
	return nil
}

// checkLimits refuses a movement of a kind that would take the sum of any
// period above that period's limit in force, or that comes before a limit
// the settings require.
func (l *Ledger) checkLimits(a *Account, kind LimitKind, w *rolling, now time.Time, amount Amount, required bool) error {
	var keys []LimitKey
	for k := range a.Limits {
		if k.Kind == kind {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 && required {
		names := make([]string, len(l.Settings.LimitPeriodsDays))
		for i, d := range l.Settings.LimitPeriodsDays {
			names[i] = periodName(d)
		}
		return refuse(CodeLimitExceeded, "set a %s %s limit before the first %s", strings.Join(names, " or "), kind, kind)
	}
	slices.SortFunc(keys, func(x, y LimitKey) int { return x.Days - y.Days })
	for _, k := range keys {
		used, max := w.total(now, time.Duration(k.Days)*24*time.Hour), a.Limits[k].At(now)
		if used+amount > max {
			return refuse(CodeLimitExceeded, "%s of %s would bring the last %d days' %ss to %s, above the %s limit of %s",
				kind, amount, k.Days, kind, used+amount, periodName(k.Days), max)
		}
	}
	return nil
}

// replay checks a client key in its scope (the player and the kind of
// command): a remembered key with the same request returns its first
// result; with another request it is a conflict. The refusal does not
// say what the first request was: the key may have been another client's.
func (l *Ledger) replay(player string, kind KeyKind, key, request string) (*KeyRecord, error) {
	if !keyPattern.MatchString(key) {
		return nil, refuse(CodeInvalidRequest, "idempotency key: want 1 to 128 visible ASCII characters (no spaces)")
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
	if err := l.openAccount(a, "a deposit is"); err != nil {
		return Decision{}, err
	}
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if err := a.refusal(now, "deposits are"); err != nil {
		return Decision{}, err
	}
	if err := l.checkLimits(a, DepositLimit, &a.deposits, now, c.Amount, l.Settings.DepositLimitRequired); err != nil {
		return Decision{}, err
	}
	return Decision{Events: []Event{&FundsDeposited{Player: c.Player, Amount: c.Amount, Key: c.Key, Balance: a.Balance + c.Amount, By: c.By}}}, nil
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
	if err := l.openAccount(a, "a withdrawal is"); err != nil {
		return Decision{}, err
	}
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if c.Amount > a.Balance {
		return Decision{}, refuse(CodeInsufficientFunds, "withdrawal of %s is more than the balance of %s", c.Amount, a.Balance)
	}
	return Decision{Events: []Event{&FundsWithdrawn{Player: c.Player, Amount: c.Amount, Key: c.Key, Balance: a.Balance - c.Amount, By: c.By}}}, nil
}

func (l *Ledger) createEmission(c CreateEmission) (Decision, error) {
	if _, err := l.Rules.Table(c.Price); err != nil {
		return Decision{}, refuse(CodeInvalidStake, "%v", err)
	}
	if c.Blocks < 1 || c.Blocks > EmissionBlocksMax {
		return Decision{}, refuse(CodeInvalidRequest, "an emission has 1 to %d blocks, not %d", EmissionBlocksMax, c.Blocks)
	}
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if c.Key != "" {
		if r, err := l.replay("", KeyEmission, c.Key, emissionRequest(c.Price, c.Blocks)); err != nil || r != nil {
			return Decision{Replay: r}, err
		}
	}
	id := fmt.Sprintf("E%04d", len(l.emissionOrder)+1)
	evs := []Event{&EmissionCreated{Emission: id, Price: c.Price, Blocks: c.Blocks, RulesVersion: l.Rules.Version, Key: c.Key, By: c.By}}
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
	if r, err := l.replay(c.Player, KeyStake, c.Key, amountRequest(c.Stake)); err != nil {
		return Decision{}, err
	} else if r != nil {
		return l.stakeReplay(r)
	}
	table, err := l.Rules.Table(c.Stake)
	if err != nil {
		return Decision{}, refuse(CodeInvalidStake, "stake %s: %v", c.Stake, err)
	}
	b := l.OpenBlock(c.Stake)
	if err := l.openAccount(a, "a stake is"); err != nil {
		return Decision{}, err
	}
	if s := l.salesSuspension(c.Stake, b); s != nil {
		return Decision{}, suspended(s, c.Stake)
	}
	if err := a.refusal(now, "stakes are"); err != nil {
		return Decision{}, err
	}
	if err := l.checkLimits(a, StakeLimit, &a.stakes, now, c.Stake, l.Settings.StakeLimitRequired); err != nil {
		return Decision{}, err
	}
	if c.Stake > a.Balance {
		return Decision{}, refuse(CodeInsufficientFunds, "stake of %s is more than the balance of %s", c.Stake, a.Balance)
	}
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

// stakeReplay answers a retried stake with its first result, the play it
// bought. The first answer was a whole play: a play that has since lost
// its unit (its UnitAssigned is not in the ledger) is not answered as one.
func (l *Ledger) stakeReplay(r *KeyRecord) (Decision, error) {
	if p := l.Plays[r.Play]; p != nil && p.Unit == nil {
		return Decision{}, unitMissing(p)
	}
	return Decision{Replay: r}, nil
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
	if p.Unit == nil {
		return nil, unitMissing(p)
	}
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
		prize := table.Prize(p.Unit.Tier)
		evs = append(evs, &PlaySettled{Play: p.ID, Player: p.Player, Block: p.Block, Unit: p.Unit.Index, Tier: p.Unit.Tier, Prize: prize, BySystem: bySystem})
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
	if err := validActor(c.By); err != nil {
		return Decision{}, err
	}
	if c.By != nil && b.State == BlockStateOpen && c.Reason == "" {
		return Decision{}, refuse(CodeInvalidRequest, "reason required to close block %s early, before it sold out", b.ID)
	}
	if err := validText("reason", c.Reason, ReasonMax, false); err != nil {
		return Decision{}, err
	}
	if b.InPlay > 0 {
		return Decision{}, refuse(CodeConflict, "block %s has %d plays in progress; they settle first", b.ID, b.InPlay)
	}
	if c.Seed.Hash() != b.Commitment.SeedHash {
		return Decision{}, refuse(CodeInternal, "block %s: the seed does not match the commitment", b.ID)
	}
	evs := []Event{&BlockClosed{Block: b.ID, Seed: c.Seed, Sold: b.Sold, By: c.By, Reason: c.Reason}}
	if b.State == BlockStateOpen {
		if next := l.nextBlock(b.Price); next != nil {
			evs = append(evs, next)
		}
	}
	return Decision{Events: evs}, nil
}

// decisionOn checks what a ban or its lifting carries: the player's
// account, who gives it, the decision's reference and the reason, all
// required.
func (l *Ledger) decisionOn(player string, by *Actor, reference, reason string) (*Account, error) {
	a, err := l.liveAccount(player)
	if err != nil {
		return nil, err
	}
	if err := validActor(by); err != nil {
		return nil, err
	}
	if err := validText("reference", reference, ReferenceMax, true); err != nil {
		return nil, err
	}
	return a, validText("reason", reason, ReasonMax, true)
}

func (l *Ledger) ban(c BanPlayer) (Decision, error) {
	a, err := l.decisionOn(c.Player, c.By, c.Reference, c.Reason)
	if err != nil {
		return Decision{}, err
	}
	for _, b := range a.Bans {
		if b.Reference != c.Reference {
			continue
		}
		if b.Reason != c.Reason {
			return Decision{}, refuse(CodeConflict, "ban %s of player %s already records decision %q, with another reason", b.ID, c.Player, c.Reference)
		}
		// The same decision again (a retry): the ban it recorded.
		return Decision{Replay: &KeyRecord{Ban: b.ID, At: b.At}}, nil
	}
	if len(a.Bans) >= BansActiveMax {
		return Decision{}, refuse(CodeConflict, "player %s has %d bans in force, the most Tresor keeps", c.Player, len(a.Bans))
	}
	id := "B" + strconv.Itoa(a.bansIssued+1)
	return Decision{Events: []Event{&PlayerBanned{Player: c.Player, Ban: id, Reference: c.Reference, Reason: c.Reason, By: c.By}}}, nil
}

func (l *Ledger) liftBan(c LiftBan) (Decision, error) {
	a, err := l.decisionOn(c.Player, c.By, c.Reference, c.Reason)
	if err != nil {
		return Decision{}, err
	}
	if a.Bans[c.Ban] == nil {
		n, err := strconv.Atoi(strings.TrimPrefix(c.Ban, "B"))
		if !strings.HasPrefix(c.Ban, "B") || err != nil || n < 1 || n > a.bansIssued {
			return Decision{}, refuse(CodeNotFound, "no ban %q of player %s", c.Ban, c.Player)
		}
		// Lifted already (a retry, or another decision): nothing to record.
		return Decision{Replay: &KeyRecord{Ban: c.Ban}}, nil
	}
	return Decision{Events: []Event{&BanLifted{Player: c.Player, Ban: c.Ban, Reference: c.Reference, Reason: c.Reason, By: c.By}}}, nil
}

func (l *Ledger) adoptSettings(c AdoptSettings) (Decision, error) {
	if err := c.Settings.Validate(); err != nil {
		return Decision{}, refuse(CodeInvalidRequest, "%v", err)
	}
	if l.Settings.Equal(c.Settings) {
		return Decision{}, nil
	}
	return Decision{Events: []Event{&SettingsAdopted{Settings: c.Settings.clone()}}}, nil
}

func (l *Ledger) resealSeeds(c ResealSeeds) (Decision, error) {
	if !masterKeyIDPattern.MatchString(c.MasterKeyID) {
		return Decision{}, refuse(CodeInvalidRequest, "master key id %q: want 16 lowercase hex digits", c.MasterKeyID)
	}
	if len(c.Seeds) > ResealSeedsMax {
		return Decision{}, refuse(CodeInvalidRequest, "%d seeds to reseal, at most %d at once", len(c.Seeds), ResealSeedsMax)
	}
	e := &SeedsResealed{MasterKeyID: c.MasterKeyID}
	seen := map[string]bool{}
	for _, r := range c.Seeds {
		b := l.Blocks[r.Block]
		switch {
		case b == nil:
			return Decision{}, refuse(CodeInvalidRequest, "reseal the seed of block %q: no such block", r.Block)
		case seen[r.Block] || len(r.SealedSeed) == 0:
			return Decision{}, refuse(CodeInvalidRequest, "reseal the seed of block %s: twice, or with no sealed seed", r.Block)
		case b.State == BlockStateClosed:
			continue // its seed is revealed: nothing secret to keep
		}
		seen[r.Block] = true
		e.Seeds = append(e.Seeds, ResealedSeed{Block: r.Block, SealedSeed: slices.Clone(r.SealedSeed)})
	}
	if len(e.Seeds) == 0 {
		return Decision{}, nil
	}
	return Decision{Events: []Event{e}}, nil
}
