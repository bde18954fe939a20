package audit

import (
	"cmp"
	"slices"
	"time"

	"github.com/fdj/tresor/domain"
)

// Report is the outcome of an audit. Its JSON keys are a contract with the
// tools that read it (docs/audit.md): never rename one.
type Report struct {
	// OK is true when no violation was found.
	OK bool `json:"ok"`
	// FromSeal is the stream sequence of the seal the audit started at, 0
	// when it started at the first event.
	FromSeal uint64 `json:"from_seal"`
	// FromState is the last sequence of the saved state a resumed audit
	// started after, 0 for an audit from the first event or a seal. The
	// report's counts cover the whole stream all the same.
	FromState uint64 `json:"from_state"`
	// LastSequence is the stream sequence of the last event checked.
	LastSequence uint64 `json:"last_sequence"`
	// Events counts the events checked, seals included.
	Events uint64 `json:"events"`
	// NewEvents counts the events this run checked: Events less the
	// saved state's.
	NewEvents uint64 `json:"new_events"`
	// Seals counts the seals whose signature and head were verified.
	Seals uint64 `json:"seals"`
	// Unanchored counts the events, from a seal, that continue a block or
	// play begun before it and so could not be checked in full.
	Unanchored uint64 `json:"unanchored_events"`
	// Plays counts the stakes placed; PlaysSettled those settled; the
	// others were in progress at the end of the stream.
	Plays        int `json:"plays"`
	PlaysSettled int `json:"plays_settled"`
	// Blocks counts the blocks opened, sold out and closed (their seed
	// checked against their commitment).
	Blocks BlockCounts `json:"blocks"`
	// Prices has the totals of each price, in price order.
	Prices []PriceTotals `json:"prices"`
	// Money moved, over all players.
	Deposits    domain.Amount `json:"deposits"`
	Withdrawals domain.Amount `json:"withdrawals"`
	Stakes      domain.Amount `json:"stakes"`
	Prizes      domain.Amount `json:"prizes"`
	// Adjustments is the net of the approved adjustments: credits to
	// players minus debits.
	Adjustments domain.Amount `json:"adjustments"`
	// PlayersBalance is what the players hold at the end.
	PlayersBalance domain.Amount `json:"players_balance"`
	// ElapsedSeconds covers this run, from New (or Resume) to Finish;
	// EventsPerSecond is NewEvents over it.
	ElapsedSeconds  float64 `json:"elapsed_seconds"`   // float-ok: a duration, not money
	EventsPerSecond float64 `json:"events_per_second"` // float-ok: a rate, not money
	// Controls counts the responsible-gaming controls re-derived from the
	// stream (limit changes, self-exclusions, bans, settings).
	Controls ControlCounts `json:"controls"`
	// ReadModelsCompared is true when the operator's read models were
	// compared with the replay's (CompareReadModels).
	ReadModelsCompared bool `json:"read_models_compared"`
	// ViolationsTotal counts every violation; ViolationCounts per code;
	// Violations lists the first ones by sequence (Config.ViolationsMax),
	// whole-stream violations (sequence 0) last.
	ViolationsTotal int          `json:"violations_total"`
	ViolationCounts map[Code]int `json:"violation_counts"`
	Violations      []Violation  `json:"violations"`
}

// BlockCounts counts blocks by what happened to them.
type BlockCounts struct {
	Opened  int `json:"opened"`
	SoldOut int `json:"sold_out"`
	Closed  int `json:"closed"`
}

// PriceTotals are the totals of one price.
type PriceTotals struct {
	Price  domain.Amount `json:"price"`
	Blocks int           `json:"blocks"`
	Plays  int           `json:"plays"`
	Stakes domain.Amount `json:"stakes"`
	Prizes domain.Amount `json:"prizes"`
}

func (a *Auditor) report() *Report {
	s := a.st
	elapsed := time.Since(a.started)
	r := &Report{
		FromSeal: a.fromSeal, FromState: a.fromStateSeq(), LastSequence: s.lastSeq, Events: s.events, Seals: a.verifier.Stats().Seals,
		Unanchored: s.unchecked + a.verifier.Stats().Skipped, Plays: s.plays, PlaysSettled: s.settled,
		Deposits: s.books.Deposits, Withdrawals: s.books.Withdrawals, Stakes: s.books.Stakes, Prizes: s.books.Prizes,
		Adjustments: s.books.Adjustments, NewEvents: s.events - a.startEvents,
		ElapsedSeconds: elapsed.Seconds(), EventsPerSecond: float64(s.events-a.startEvents) / max(elapsed.Seconds(), 1e-9),
		ReadModelsCompared: a.compared, Prices: []PriceTotals{}, Controls: s.ctl.counts,
	}
	for id := range s.accounts {
		r.PlayersBalance += s.books.Balances[domain.PlayerAccount(id)]
	}
	for _, b := range s.blocks {
		r.Blocks.Opened++
		if b.sold == s.rules.BlockUnits {
			r.Blocks.SoldOut++
		}
		if b.state == blockClosed {
			r.Blocks.Closed++
		}
	}
	for _, t := range s.prices {
		r.Prices = append(r.Prices, *t)
	}
	slices.SortFunc(r.Prices, func(x, y PriceTotals) int { return cmp.Compare(x.Price, y.Price) })
	vs := a.vs
	vs.mu.Lock()
	defer vs.mu.Unlock()
	vs.trim()
	r.ViolationsTotal = vs.total
	r.ViolationCounts = make(map[Code]int, len(vs.byCode))
	for c, n := range vs.byCode {
		r.ViolationCounts[c] = n
	}
	r.Violations = append([]Violation{}, vs.kept...)
	r.OK = vs.total == 0
	return r
}

func (a *Auditor) fromStateSeq() uint64 {
	if a.resumed == nil {
		return 0
	}
	return a.resumed.LastSequence
}
