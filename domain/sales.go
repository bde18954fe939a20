package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SuspendSales stops the sale of units in a scope until a ResumeSales: a
// stake decided after the suspension is recorded is refused, whatever is
// still in flight. Plays already bought go on (their outcome is fixed), and
// deposits and withdrawals are untouched. Scope is written as the API takes
// it ("all", "price:2.00", "block:E0001-B001", "emission:E0001"); Reason
// says why and By who, both required.
type SuspendSales struct {
	Scope  string
	Reason string
	By     *Actor
}

// ResumeSales ends the suspension Suspension names, with a reason.
type ResumeSales struct {
	Suspension string
	Reason     string
	By         *Actor
}

func (SuspendSales) command() {}
func (ResumeSales) command()  {}

// SuspensionsActiveMax bounds the suspensions in force at once: each is a
// scope an operator stopped by hand, and every stake is checked against
// all of them.
const SuspensionsActiveMax = 256

// ScopeKind is what a suspension's scope covers. Its zero value is no kind
// at all: a scope always names one.
type ScopeKind string

// The kinds of scope: every sale, the sales of one price, of one block or
// of one emission.
const (
	ScopeAll      ScopeKind = "all"
	ScopePrice    ScopeKind = "price"
	ScopeBlock    ScopeKind = "block"
	ScopeEmission ScopeKind = "emission"
)

// SalesScope is the sales a suspension stops. It is written as text
// ("price:2.00"): in events, in snapshots and in the API alike.
type SalesScope struct {
	Kind ScopeKind
	// Price is the price of a ScopePrice; ID the block or the emission of
	// a ScopeBlock or a ScopeEmission.
	Price Amount
	ID    string
}

// ParseSalesScope reads a scope as String writes it; a price may be given
// with fewer decimals ("price:2"). It checks the form only: whether the
// price, block or emission exists is the decider's to say.
func ParseSalesScope(s string) (SalesScope, error) {
	if s == string(ScopeAll) {
		return SalesScope{Kind: ScopeAll}, nil
	}
	kind, value, ok := strings.Cut(s, ":")
	switch k := ScopeKind(kind); {
	case !ok:
	case k == ScopePrice:
		p, err := ParseAmount(value)
		if err != nil || p == 0 {
			return SalesScope{}, refuse(CodeInvalidRequest, "scope %.80q: want a price such as price:2.00", s)
		}
		return SalesScope{Kind: ScopePrice, Price: p}, nil
	case (k == ScopeBlock || k == ScopeEmission) && ValidID(value):
		return SalesScope{Kind: k, ID: value}, nil
	case k == ScopeBlock || k == ScopeEmission:
		return SalesScope{}, refuse(CodeInvalidRequest, "scope %.80q: want a %s id after %q", s, k, kind+":")
	}
	return SalesScope{}, refuse(CodeInvalidRequest, "scope %.80q: want all, price:P, block:ID or emission:ID", s)
}

// String writes the scope: "all", "price:2.00", "block:E0001-B001",
// "emission:E0001".
func (s SalesScope) String() string {
	switch s.Kind {
	case ScopeAll:
		return string(ScopeAll)
	case ScopePrice:
		return string(ScopePrice) + ":" + s.Price.String()
	}
	return string(s.Kind) + ":" + s.ID
}

// MarshalText writes String, and refuses a scope of no kind.
func (s SalesScope) MarshalText() ([]byte, error) {
	if _, err := ParseSalesScope(s.String()); err != nil {
		return nil, err
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads what MarshalText writes.
func (s *SalesScope) UnmarshalText(b []byte) error {
	v, err := ParseSalesScope(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Covers reports whether the scope stops the sale of a unit of price from
// block (of emission): block and emission are "" when no block of the
// price is on sale.
func (s SalesScope) Covers(price Amount, block, emission string) bool {
	switch s.Kind {
	case ScopeAll:
		return true
	case ScopePrice:
		return s.Price == price
	case ScopeBlock:
		return block != "" && s.ID == block
	case ScopeEmission:
		return emission != "" && s.ID == emission
	}
	return false
}

// Suspension is a suspension of sales in force: its id, its scope, why,
// since when and by whom.
type Suspension struct {
	ID     string
	Scope  SalesScope
	Reason string
	At     time.Time
	By     *Actor
}

// SalesSuspended records that the sales of a scope stop: no StakePlaced in
// the scope follows it until its SalesResumed.
type SalesSuspended struct {
	Suspension string     `json:"suspension"`
	Scope      SalesScope `json:"scope"`
	Reason     string     `json:"reason"`
	By         *Actor     `json:"by,omitempty"`
}

// SalesResumed records the end of a suspension; Scope repeats the
// suspension's, so that a reader of this event alone knows what resumed.
type SalesResumed struct {
	Suspension string     `json:"suspension"`
	Scope      SalesScope `json:"scope"`
	Reason     string     `json:"reason"`
	By         *Actor     `json:"by,omitempty"`
}

// UnmarshalJSON reads a SalesSuspended and refuses one without its scope.
func (e *SalesSuspended) UnmarshalJSON(b []byte) error {
	type fields SalesSuspended // without this method
	return decodeChecked(b, (*fields)(e), func() error { return scoped(e.Scope) })
}

// UnmarshalJSON reads a SalesResumed and refuses one without its scope.
func (e *SalesResumed) UnmarshalJSON(b []byte) error {
	type fields SalesResumed // without this method
	return decodeChecked(b, (*fields)(e), func() error { return scoped(e.Scope) })
}

// scoped refuses a scope of no kind: an absent or null scope would
// otherwise be read as one that covers nothing.
func scoped(s SalesScope) error {
	if s.Kind == "" {
		return errors.New("a suspension of sales without its scope")
	}
	return nil
}

// decodeChecked decodes b into v, then refuses it when check, which reads
// what was decoded, fails: an event's field that is absent or null must
// not be read as its zero value.
func decodeChecked(b []byte, v any, check func() error) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	return check()
}

func (*SalesSuspended) EventType() string { return TypeSalesSuspended }
func (*SalesResumed) EventType() string   { return TypeSalesResumed }

// AggregateID implementations: a suspension is its own aggregate.
func (e *SalesSuspended) AggregateID() string { return salesAggregate(e.Suspension) }
func (e *SalesResumed) AggregateID() string   { return salesAggregate(e.Suspension) }

func salesAggregate(id string) string { return "sales." + id }

// suspensionID names the n-th suspension ever recorded (from 1).
func suspensionID(n int) string { return numbered("S", n) }

// suspensionNumber reads n out of suspensionID(n), 0 for anything else.
func suspensionNumber(id string) int { return numberOf("S", id) }

// staffDecision checks who gives a suspension or a resumption, and why:
// both required.
func staffDecision(by *Actor, reason string) error {
	if by == nil {
		return refuse(CodeInvalidRequest, "a suspension of sales records who decided it: no actor given")
	}
	if err := validActor(by); err != nil {
		return err
	}
	return validText("reason", reason, ReasonMax, true)
}

func (l *Ledger) suspendSales(c SuspendSales) (Decision, error) {
	if err := staffDecision(c.By, c.Reason); err != nil {
		return Decision{}, err
	}
	scope, err := ParseSalesScope(c.Scope)
	if err != nil {
		return Decision{}, err
	}
	if err := l.scopeExists(scope); err != nil {
		return Decision{}, err
	}
	for _, s := range l.Suspensions {
		if s.Scope != scope {
			continue
		}
		if s.Reason != c.Reason {
			return Decision{}, refuse(CodeConflict, "sales of %s are already suspended by %s, for another reason", scope, s.ID)
		}
		// The same suspension again (a retry): the one in force.
		return Decision{Replay: &KeyRecord{Suspension: s.ID, At: s.At}}, nil
	}
	if len(l.Suspensions) >= SuspensionsActiveMax {
		return Decision{}, refuse(CodeConflict, "%d suspensions are in force, the most Tresor keeps: resume one first", len(l.Suspensions))
	}
	id := suspensionID(l.suspensionsIssued + 1)
	return Decision{Events: []Event{&SalesSuspended{Suspension: id, Scope: scope, Reason: c.Reason, By: c.By}}}, nil
}

// scopeExists refuses a scope that names a price the rules do not sell, or
// a block or an emission that does not exist, or a block already closed.
func (l *Ledger) scopeExists(s SalesScope) error {
	switch s.Kind {
	case ScopePrice:
		if _, err := l.Rules.Table(s.Price); err != nil {
			return refuse(CodeNotFound, "scope %s: no units of %s are sold (%v)", s, s.Price, err)
		}
	case ScopeBlock:
		b := l.Blocks[s.ID]
		switch {
		case b == nil:
			return refuse(CodeNotFound, "scope %s: no block %q", s, s.ID)
		case b.State == BlockStateClosed:
			return refuse(CodeConflict, "scope %s: block %s is closed and sells nothing", s, s.ID)
		}
	case ScopeEmission:
		if l.Emissions[s.ID] == nil {
			return refuse(CodeNotFound, "scope %s: no emission %q", s, s.ID)
		}
	}
	return nil
}

func (l *Ledger) resumeSales(c ResumeSales) (Decision, error) {
	if err := staffDecision(c.By, c.Reason); err != nil {
		return Decision{}, err
	}
	s := l.Suspensions[c.Suspension]
	if s == nil {
		if n := suspensionNumber(c.Suspension); n >= 1 && n <= l.suspensionsIssued {
			return Decision{}, refuse(CodeConflict, "suspension %s is already resumed", c.Suspension)
		}
		return Decision{}, refuse(CodeNotFound, "no suspension %.80q", c.Suspension)
	}
	return Decision{Events: []Event{&SalesResumed{Suspension: s.ID, Scope: s.Scope, Reason: c.Reason, By: c.By}}}, nil
}

// salesSuspension returns the suspension that stops a stake of price,
// which would buy a unit of open (nil when no block of the price is on
// sale): the oldest in force whose scope covers it, or nil.
func (l *Ledger) salesSuspension(price Amount, open *Block) *Suspension {
	block, emission := "", ""
	if open != nil {
		block, emission = open.ID, open.Emission
	}
	var first *Suspension
	for _, s := range l.Suspensions {
		if s.Scope.Covers(price, block, emission) && (first == nil || suspensionNumber(s.ID) < suspensionNumber(first.ID)) {
			first = s
		}
	}
	return first
}

// suspended refuses a stake that a suspension in force stops, naming it.
func suspended(s *Suspension, stake Amount) error {
	return refuse(CodeSalesSuspended, "stakes of %s are refused: sales of %s are suspended (suspension %s, since %s)",
		stake, s.Scope, s.ID, s.At.Format(time.RFC3339))
}

// evolveSales applies a suspension or its end.
func (l *Ledger) evolveSales(at time.Time, e Event) error {
	switch e := e.(type) {
	case *SalesSuspended:
		if l.Suspensions[e.Suspension] != nil {
			return fmt.Errorf("evolve %s: suspension %s already in force", e.EventType(), e.Suspension)
		}
		l.Suspensions[e.Suspension] = &Suspension{ID: e.Suspension, Scope: e.Scope, Reason: e.Reason, At: at, By: e.By}
		l.suspensionsIssued++
	case *SalesResumed:
		if l.Suspensions[e.Suspension] == nil {
			return fmt.Errorf("evolve %s: no suspension %s in force", e.EventType(), e.Suspension)
		}
		delete(l.Suspensions, e.Suspension)
	}
	return nil
}
