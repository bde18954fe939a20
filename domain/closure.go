package domain

import (
	"slices"
	"time"
)

// CloseAccount closes a player's account, asked by the operator's staff or
// the player: only with a zero balance (the rest is withdrawn first) and
// no play in progress, so that no money is left on it and no prize is ever
// owed to it. After it the account takes no deposit, withdrawal, stake or
// change of its limits and exclusions; it stays readable, and the time of
// its closure is where the retention of the player's personal data starts.
// Closing a closed account records nothing.
type CloseAccount struct {
	Player string
	Reason string
	By     *Actor
}

// ReopenAccount reopens a closed account: the operator's staff only, with
// a reason.
type ReopenAccount struct {
	Player string
	Reason string
	By     *Actor
}

func (CloseAccount) command()  {}
func (ReopenAccount) command() {}

// AccountClosed records the closure of an account; the event's time is
// the closure's.
type AccountClosed struct {
	Player string `json:"player"`
	Reason string `json:"reason"`
	By     *Actor `json:"by,omitempty"`
}

// AccountReopened records that a closed account is open again.
type AccountReopened struct {
	Player string `json:"player"`
	Reason string `json:"reason"`
	By     *Actor `json:"by,omitempty"`
}

func (*AccountClosed) EventType() string   { return TypeAccountClosed }
func (*AccountReopened) EventType() string { return TypeAccountReopened }

// AggregateID implementations: facts of the player's account.
func (e *AccountClosed) AggregateID() string   { return playerAggregate(e.Player) }
func (e *AccountReopened) AggregateID() string { return playerAggregate(e.Player) }

// ClosedAt reports whether the account is closed, and since when.
func (a *Account) ClosedAt() (time.Time, bool) { return a.closedAt, !a.closedAt.IsZero() }

// openAccount returns an account that is not closed, for a command that
// changes it: account_closed otherwise.
func (l *Ledger) openAccount(a *Account, what string) error {
	if at, closed := a.ClosedAt(); closed {
		return refuse(CodeAccountClosed, "the account of player %s is closed since %s: %s refused", a.Player, at.Format(time.RFC3339), what)
	}
	return nil
}

func (l *Ledger) closeAccount(c CloseAccount) (Decision, error) {
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if err := closureBy(c.By, c.Reason); err != nil {
		return Decision{}, err
	}
	if c.By.Role == RolePlayer && c.By.Subject != c.Player {
		return Decision{}, refuse(CodeForbidden, "a player closes their own account only")
	}
	if _, closed := a.ClosedAt(); closed {
		return Decision{}, nil // a retry: the account is closed
	}
	if a.Balance != 0 {
		return Decision{}, refuse(CodeConflict, "the account of player %s holds %s: withdraw it before closing the account", c.Player, a.Balance)
	}
	if play := l.playInProgress(c.Player); play != "" {
		return Decision{}, refuse(CodeConflict, "play %s of player %s is in progress: it settles (or the system completes it) before the account closes", play, c.Player)
	}
	return Decision{Events: []Event{&AccountClosed{Player: c.Player, Reason: c.Reason, By: c.By}}}, nil
}

func (l *Ledger) reopenAccount(c ReopenAccount) (Decision, error) {
	a, err := l.liveAccount(c.Player)
	if err != nil {
		return Decision{}, err
	}
	if err := closureBy(c.By, c.Reason); err != nil {
		return Decision{}, err
	}
	if c.By.Role != RoleOperator {
		return Decision{}, refuse(CodeForbidden, "only the operator reopens an account, not a %s", c.By.Role)
	}
	if _, closed := a.ClosedAt(); !closed {
		return Decision{}, refuse(CodeConflict, "the account of player %s is not closed", c.Player)
	}
	if at, erased := a.ErasedAt(); erased {
		return Decision{}, refuse(CodeConflict, "the personal data of player %s was erased at %s: the account stays closed", c.Player, at.Format(time.RFC3339))
	}
	return Decision{Events: []Event{&AccountReopened{Player: c.Player, Reason: c.Reason, By: c.By}}}, nil
}

// closureBy checks who closes or reopens an account, and why: both
// required.
func closureBy(by *Actor, reason string) error {
	if by == nil {
		return refuse(CodeInvalidRequest, "a closure or a reopening records who asked: no actor given")
	}
	if err := validActor(by); err != nil {
		return err
	}
	return validText("reason", reason, ReasonMax, true)
}

// playInProgress returns the first (by id) play in progress of a player,
// or "".
func (l *Ledger) playInProgress(player string) string {
	var ids []string
	for id, p := range l.Plays {
		if p.Player == player {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return slices.Min(ids)
}
