package domain

import (
	"fmt"
	"strings"
)

// Books recomputes the double-entry books from events alone, independently
// of the ledger: every account's balance from the postings, the totals per
// kind of movement, and, at every event, the checks a finance team or a
// regulator makes. Simulate, the audit and the projections' tests use it.
type Books struct {
	// Balances holds each account's balance: credits minus debits.
	Balances map[string]Amount
	// Debits and Credits are the totals of all postings' two sides.
	Debits, Credits                       Amount
	Deposits, Withdrawals, Stakes, Prizes Amount
	// Adjustments is the net of approved adjustments: credits to players
	// minus debits.
	Adjustments Amount
	// Events counts the events applied.
	Events int
}

// NewBooks returns empty books.
func NewBooks() *Books { return &Books{Balances: map[string]Amount{}} }

// Apply posts one event and checks it: a player's balance never goes below
// zero, and the balance an event records after itself (balance_after)
// equals the one the postings give. The error names the event and both
// figures.
func (b *Books) Apply(e Event) error {
	b.Events++
	for _, p := range Postings(e) {
		b.Balances[p.Debit] -= p.Amount
		b.Balances[p.Credit] += p.Amount
		b.Debits += p.Amount
		b.Credits += p.Amount
	}
	var player string
	var recorded Amount
	switch e := e.(type) {
	case *FundsDeposited:
		b.Deposits += e.Amount
		player, recorded = e.Player, e.Balance
	case *FundsWithdrawn:
		b.Withdrawals += e.Amount
		player, recorded = e.Player, e.Balance
	case *StakePlaced:
		b.Stakes += e.Stake
		player, recorded = e.Player, e.Balance
	case *PrizePaid:
		b.Prizes += e.Amount
		player, recorded = e.Player, e.Balance
	case *AdjustmentApproved:
		b.Adjustments += e.Signed()
		player, recorded = e.Player, e.Balance
	default:
		return nil
	}
	got := b.Balances[PlayerAccount(player)]
	if got < 0 {
		return fmt.Errorf("%s of player %s: balance %s below zero", e.EventType(), player, got)
	}
	if got != recorded {
		return fmt.Errorf("%s of player %s: records balance_after %s, the postings give %s", e.EventType(), player, recorded, got)
	}
	return nil
}

// Check verifies the books as a whole: debits equal credits, the accounts
// sum to zero, and the players' balances equal deposits − withdrawals −
// stakes + prizes + adjustments. It returns a one-line summary and the first violation.
func (b *Books) Check() (string, error) {
	var players, sum Amount
	for acct, bal := range b.Balances {
		sum += bal
		if strings.HasPrefix(acct, "player.") {
			players += bal
		}
	}
	summary := fmt.Sprintf("%d events; deposits %s, withdrawals %s, stakes %s, prizes %s, adjustments %s; players hold %s",
		b.Events, b.Deposits, b.Withdrawals, b.Stakes, b.Prizes, b.Adjustments, players)
	want := b.Deposits - b.Withdrawals - b.Stakes + b.Prizes + b.Adjustments
	switch {
	case b.Debits != b.Credits:
		return summary, fmt.Errorf("debits %s ≠ credits %s", b.Debits, b.Credits)
	case sum != 0:
		return summary, fmt.Errorf("the accounts sum to %s, want 0", sum)
	case players != want:
		return summary, fmt.Errorf("players hold %s, but deposits − withdrawals − stakes + prizes + adjustments = %s", players, want)
	}
	return summary, nil
}
