package projections

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/shopspring/decimal"
)

// ReportData is everything the report pack reads, in one snapshot: every
// block row, emission, day and cash day, and the stream position (Seq)
// they reflect.
type ReportData struct {
	Seq       uint64
	Blocks    []BlockRow
	Emissions []Emission
	// Days and CashDays are in day order.
	Days     []Day
	CashDays []CashDay
	// Suspensions are what Store.Suspensions lists.
	Suspensions []Suspension
	// AdjustmentDays are in day order, then kind.
	AdjustmentDays []AdjustmentDay
}

// Win is a settled play's prize, as the large-wins report lists it.
type Win struct {
	Play     string        `json:"play"`
	Player   string        `json:"player"`
	Block    string        `json:"block"`
	Unit     uint32        `json:"unit"`
	Tier     domain.Tier   `json:"tier"`
	Prize    domain.Amount `json:"prize"`
	At       time.Time     `json:"at"`
	BySystem bool          `json:"by_system"`
}

// LargeWinsQuery asks for the plays settled from From (included) to To
// (excluded) whose prize is at least Threshold (positive), oldest first,
// at most Limit (≤ LargeWinsMax).
type LargeWinsQuery struct {
	Threshold domain.Amount
	From, To  time.Time
	Limit     int
}

// LargeWinsMax bounds the wins of one report.
const LargeWinsMax = 10_000

// Check validates a large-wins query.
func (q LargeWinsQuery) Check() error {
	switch {
	case q.Threshold <= 0:
		return errorsf(ErrInvalid, "large-win threshold %s: must be positive", q.Threshold)
	case q.Limit < 1 || q.Limit > LargeWinsMax:
		return errorsf(ErrInvalid, "large wins: limit %d, want 1 to %d", q.Limit, LargeWinsMax)
	case !q.To.After(q.From):
		return errorsf(ErrInvalid, "large wins from %s to %s: an empty period", q.From, q.To)
	}
	return nil
}

// ReportDaysMax bounds the days of one report (ten years).
const ReportDaysMax = 3660

// Period is the span a report covers: the UTC days From to To, both
// included.
type Period struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Start and End are the period's first instant and the instant after it.
func (p Period) Start() time.Time {
	t, _ := time.Parse(time.DateOnly, p.From)
	return t
}

// End is the instant after the period's last day.
func (p Period) End() time.Time {
	t, _ := time.Parse(time.DateOnly, p.To)
	return t.AddDate(0, 0, 1)
}

// NewPeriod checks a period of YYYY-MM-DD days; an empty from is the
// first day of activity of data (or to), an empty to is today.
func NewPeriod(from, to string, first string, now time.Time) (Period, error) {
	p := Period{From: from, To: to}
	if p.To == "" {
		p.To = DayKey(now)
	}
	if p.From == "" {
		p.From = cmp.Or(first, p.To)
		p.From = min(p.From, p.To)
	}
	for _, d := range []string{p.From, p.To} {
		if _, err := time.Parse(time.DateOnly, d); err != nil {
			return p, errorsf(ErrInvalid, "date %.32q: want YYYY-MM-DD", d)
		}
	}
	switch days := int(p.End().Sub(p.Start()) / (24 * time.Hour)); {
	case days < 1:
		return p, errorsf(ErrInvalid, "period from %s to %s: the end comes first", p.From, p.To)
	case days > ReportDaysMax:
		return p, errorsf(ErrInvalid, "period from %s to %s: %d days, at most %d", p.From, p.To, days, ReportDaysMax)
	}
	return p, nil
}

// FirstDay returns the first day with any activity, "" for none.
func (d *ReportData) FirstDay() string {
	first := ""
	if len(d.Days) > 0 {
		first = d.Days[0].Day
	}
	if len(d.CashDays) > 0 && (first == "" || d.CashDays[0].Day < first) {
		first = d.CashDays[0].Day
	}
	return first
}

// ReturnRate is a share of stakes paid out, an exact decimal rounded to
// PayoutRateDecimals, or nil when nothing was staked.
func ReturnRate(prizes, stakes domain.Amount) *decimal.Decimal {
	if stakes == 0 {
		return nil
	}
	r := decimal.NewFromInt(int64(prizes)).DivRound(decimal.NewFromInt(int64(stakes)), PayoutRateDecimals)
	return &r
}

// SalesFigures are the figures the block and emission reports give.
type SalesFigures struct {
	Units     int           `json:"units"`
	UnitsSold int           `json:"units_sold"`
	Stakes    domain.Amount `json:"stakes"`
	// PrizesPaid is what was paid; PrizesOwed the Article 3 prizes of the
	// units sold, PrizesOutstanding what of them is still to pay (plays in
	// progress).
	PrizesPaid        domain.Amount `json:"prizes_paid"`
	PrizesOwed        domain.Amount `json:"prizes_owed"`
	PrizesOutstanding domain.Amount `json:"prizes_outstanding"`
	// TheoreticalReturn is the Article 3 table's prizes over a sold-out
	// block's sales (0.7 under the 2015 rules); ActualReturn the prizes
	// paid so far over the stakes so far (nil before the first stake).
	TheoreticalReturn decimal.Decimal  `json:"theoretical_return"`
	ActualReturn      *decimal.Decimal `json:"actual_return"`
	// PlaysInProgress are sold and not settled; StakesInPlay their stakes.
	PlaysInProgress   int           `json:"plays_in_progress"`
	StakesInPlay      domain.Amount `json:"stakes_in_play"`
	PlaysSettled      int           `json:"plays_settled"`
	CompletedBySystem int           `json:"completed_by_system"`
	// table and capacity add up the theoretical return of several blocks.
	table, capacity domain.Amount
}

// blockFigures computes a block's figures.
func blockFigures(b *BlockRow) SalesFigures {
	f := SalesFigures{Units: b.Units, UnitsSold: b.Counters.UnitsSold, Stakes: b.Counters.Sales, PrizesPaid: b.Counters.PrizesPaid,
		PrizesOwed: b.Counters.PrizesOwed, PlaysSettled: b.Settled, CompletedBySystem: b.BySystem,
		PlaysInProgress: b.Counters.UnitsSold - b.Settled, capacity: domain.Amount(b.Units) * b.Price}
	f.PrizesOutstanding = f.PrizesOwed - f.PrizesPaid
	f.StakesInPlay = domain.Amount(f.PlaysInProgress) * b.Price
	for _, t := range b.Tiers {
		f.table += domain.Amount(t.Lots) * t.Prize
	}
	return f.rates()
}

// rates computes the returns from the sums.
func (f SalesFigures) rates() SalesFigures {
	f.TheoreticalReturn = decimal.Zero
	if r := ReturnRate(f.table, f.capacity); r != nil {
		f.TheoreticalReturn = *r
	}
	f.ActualReturn = ReturnRate(f.PrizesPaid, f.Stakes)
	return f
}

// add adds another block's figures.
func (f *SalesFigures) add(o SalesFigures) {
	f.Units += o.Units
	f.UnitsSold += o.UnitsSold
	f.Stakes += o.Stakes
	f.PrizesPaid += o.PrizesPaid
	f.PrizesOwed += o.PrizesOwed
	f.PrizesOutstanding += o.PrizesOutstanding
	f.PlaysInProgress += o.PlaysInProgress
	f.StakesInPlay += o.StakesInPlay
	f.PlaysSettled += o.PlaysSettled
	f.CompletedBySystem += o.CompletedBySystem
	f.table += o.table
	f.capacity += o.capacity
}

// BlockLine is one block of the blocks report.
type BlockLine struct {
	Block    string            `json:"block"`
	Emission string            `json:"emission"`
	Price    domain.Amount     `json:"price"`
	State    domain.BlockState `json:"state"`
	OpenedAt time.Time         `json:"opened_at"`
	ClosedAt *time.Time        `json:"closed_at,omitempty"`
	SalesFigures
}

// EmissionLine is one emission of the emissions report.
type EmissionLine struct {
	Emission string        `json:"emission"`
	Price    domain.Amount `json:"price"`
	Blocks   int           `json:"blocks"`
	Opened   int           `json:"blocks_opened"`
	SalesFigures
}

// DayLine is one day of the days report. A day without any activity is
// listed with Activity false and zero flows.
type DayLine struct {
	Day         string        `json:"day"`
	Activity    bool          `json:"activity"`
	UnitsSold   int           `json:"units_sold"`
	Stakes      domain.Amount `json:"stakes"`
	PrizesPaid  domain.Amount `json:"prizes_paid"`
	PrizesOwed  domain.Amount `json:"prizes_owed"`
	Deposits    domain.Amount `json:"deposits"`
	Withdrawals domain.Amount `json:"withdrawals"`
	// ActualReturn is the day's prizes paid over its stakes (nil without
	// stakes); TheoreticalReturn the Article 3 rate of the blocks sold,
	// nil when the day sold none.
	TheoreticalReturn *decimal.Decimal `json:"theoretical_return"`
	ActualReturn      *decimal.Decimal `json:"actual_return"`
	PlaysSettled      int              `json:"plays_settled"`
	CompletedBySystem int              `json:"completed_by_system"`
	// PlaysInProgress and StakesInPlay are at the end of the day.
	PlaysInProgress int           `json:"plays_in_progress"`
	StakesInPlay    domain.Amount `json:"stakes_in_play"`
	// AdjustedCredits and AdjustedDebits are what the day's approved
	// adjustments credited to players and debited from them: with the
	// deposits, withdrawals, stakes and prizes, the day's change of the
	// liability.
	AdjustedCredits domain.Amount `json:"adjusted_credits"`
	AdjustedDebits  domain.Amount `json:"adjusted_debits"`
}

// LiabilityLine is the players' liability at the end of one day: the total
// of their balances.
type LiabilityLine struct {
	Day       string        `json:"day"`
	Activity  bool          `json:"activity"`
	Liability domain.Amount `json:"liability"`
	Change    domain.Amount `json:"change"`
}

// inPeriod reports whether a block was on sale or in play during the
// period: opened before its end, not closed before its start.
func inPeriod(b *BlockRow, p Period) bool {
	return b.OpenedAt.Before(p.End()) && (b.ClosedAt == nil || !b.ClosedAt.Before(p.Start()))
}

// BlocksReport lists the blocks on sale or in play during the period, with
// their figures to date.
func BlocksReport(d *ReportData, p Period) []BlockLine {
	out := []BlockLine{}
	for i := range d.Blocks {
		b := &d.Blocks[i]
		if inPeriod(b, p) {
			out = append(out, BlockLine{Block: b.ID, Emission: b.Emission, Price: b.Price, State: b.State, OpenedAt: b.OpenedAt, ClosedAt: b.ClosedAt, SalesFigures: blockFigures(b)})
		}
	}
	return out
}

// EmissionsReport lists the emissions with a block on sale or in play
// during the period, with the figures of all their blocks to date.
func EmissionsReport(d *ReportData, p Period) []EmissionLine {
	out := []EmissionLine{}
	for _, e := range d.Emissions {
		line := EmissionLine{Emission: e.ID, Price: e.Price, Blocks: e.Blocks}
		active := false
		for i := range d.Blocks {
			if b := &d.Blocks[i]; b.Emission == e.ID {
				line.Opened++
				line.add(blockFigures(b))
				active = active || inPeriod(b, p)
			}
		}
		if active {
			line.SalesFigures = line.rates()
			out = append(out, line)
		}
	}
	return out
}

// dayIndex looks days up by key.
func dayIndex[T any](rows []T, key func(T) string) map[string]T {
	m := make(map[string]T, len(rows))
	for _, r := range rows {
		m[key(r)] = r
	}
	return m
}

// eachDay calls fn for every day of the period, in order.
func eachDay(p Period, fn func(day string)) {
	for t := p.Start(); t.Before(p.End()); t = t.AddDate(0, 0, 1) {
		fn(DayKey(t))
	}
}

// DaysReport lists every day of the period, those without activity too.
// Plays in progress at a day's end count from the first day of the stream.
func DaysReport(d *ReportData, p Period, rules *domain.RuleSet) []DayLine {
	days := dayIndex(d.Days, func(x Day) string { return x.Day })
	cash := dayIndex(d.CashDays, func(x CashDay) string { return x.Day })
	adjusted := map[string]AdjustmentDay{}
	for _, a := range d.AdjustmentDays {
		sum := adjusted[a.Day]
		sum.Add(&a)
		adjusted[a.Day] = sum
	}
	var inPlay int
	var staked domain.Amount
	for _, x := range d.Days {
		if x.Day < p.From {
			inPlay += x.Counters.UnitsSold - x.Settled
			staked += x.Counters.Sales - x.SettledStakes
		}
	}
	out := []DayLine{}
	eachDay(p, func(day string) {
		x, c, a := days[day], cash[day], adjusted[day]
		inPlay += x.Counters.UnitsSold - x.Settled
		staked += x.Counters.Sales - x.SettledStakes
		line := DayLine{Day: day, UnitsSold: x.Counters.UnitsSold, Stakes: x.Counters.Sales, PrizesPaid: x.Counters.PrizesPaid,
			PrizesOwed: x.Counters.PrizesOwed, Deposits: c.Deposits, Withdrawals: c.Withdrawals,
			ActualReturn: ReturnRate(x.Counters.PrizesPaid, x.Counters.Sales), PlaysSettled: x.Settled,
			CompletedBySystem: x.BySystem, PlaysInProgress: inPlay, StakesInPlay: staked,
			AdjustedCredits: a.Credits, AdjustedDebits: a.Debits}
		line.Activity = x.Counters != (Counters{}) || x.Settled != 0 || c.Deposits != 0 || c.Withdrawals != 0 || a.Approved != 0
		if x.Counters.Sales > 0 {
			line.TheoreticalReturn = uniformRate(rules)
		}
		out = append(out, line)
	})
	return out
}

// uniformRate is the Article 3 payout rate shared by every table of the
// rules (0.7 for the 2015 rules), nil when the tables differ: a day's
// stakes are not kept per price, so a mixed rate could not be weighed.
func uniformRate(rules *domain.RuleSet) *decimal.Decimal {
	var rate *decimal.Decimal
	for i := range rules.Tables {
		r := rules.Tables[i].PayoutRate(rules.BlockUnits)
		if rate != nil && !rate.Equal(r) {
			return nil
		}
		rate = &r
	}
	return rate
}

// LiabilityReport lists, for every day of the period, the total of the
// players' balances at its end: deposits − withdrawals − stakes + prizes
// + adjustments of every day up to it.
func LiabilityReport(d *ReportData, p Period) []LiabilityLine {
	net := map[string]domain.Amount{}
	active := map[string]bool{}
	for _, x := range d.Days {
		net[x.Day] += x.Counters.PrizesPaid - x.Counters.Sales
		active[x.Day] = active[x.Day] || x.Counters.Sales != 0 || x.Counters.PrizesPaid != 0
	}
	for _, c := range d.CashDays {
		net[c.Day] += c.Deposits - c.Withdrawals
		active[c.Day] = active[c.Day] || c.Deposits != 0 || c.Withdrawals != 0
	}
	for _, a := range d.AdjustmentDays {
		net[a.Day] += a.Credits - a.Debits
		active[a.Day] = true
	}
	var liability domain.Amount
	for day, n := range net {
		if day < p.From {
			liability += n
		}
	}
	out := []LiabilityLine{}
	eachDay(p, func(day string) {
		liability += net[day]
		out = append(out, LiabilityLine{Day: day, Activity: active[day], Liability: liability, Change: net[day]})
	})
	return out
}

// CSV writes report lines as CSV (RFC 4180) with a header line: the lines'
// JSON keys, amounts in euros with two decimals, rates as exact decimals,
// times in RFC 3339, absent values empty. Its columns are a contract: add
// at the end only.
func CSV[T any](w io.Writer, header []string, lines []T, row func(T) []string) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("write report csv: %w", err)
	}
	for _, l := range lines {
		if err := cw.Write(row(l)); err != nil {
			return fmt.Errorf("write report csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write report csv: %w", err)
	}
	return nil
}

// Header and Row give each report's CSV columns.
var (
	figuresHeader = []string{"units", "units_sold", "stakes", "prizes_paid", "prizes_owed", "prizes_outstanding", "theoretical_return",
		"actual_return", "plays_in_progress", "stakes_in_play", "plays_settled", "completed_by_system"}
	// BlocksHeader is the blocks report's CSV header.
	BlocksHeader = append([]string{"block", "emission", "price", "state", "opened_at", "closed_at"}, figuresHeader...)
	// EmissionsHeader is the emissions report's CSV header.
	EmissionsHeader = append([]string{"emission", "price", "blocks", "blocks_opened"}, figuresHeader...)
	// DaysHeader is the days report's CSV header.
	DaysHeader = []string{"day", "activity", "units_sold", "stakes", "prizes_paid", "prizes_owed", "deposits", "withdrawals",
		"theoretical_return", "actual_return", "plays_settled", "completed_by_system", "plays_in_progress", "stakes_in_play",
		"adjusted_credits", "adjusted_debits"}
	// LiabilityHeader is the liability report's CSV header.
	LiabilityHeader = []string{"day", "activity", "liability", "change"}
	// WinsHeader is the large-wins report's CSV header.
	WinsHeader = []string{"play", "player", "block", "unit", "tier", "prize", "at", "by_system"}
	// SuspensionsHeader is the suspensions report's CSV header.
	SuspensionsHeader = []string{"suspension", "scope", "from", "to", "reason", "by", "resume_reason", "resumed_by"}
)

// SuspensionLine is one suspended period of the suspensions report: from
// its SalesSuspended to its SalesResumed (To nil while in force).
type SuspensionLine struct {
	Suspension   string     `json:"suspension"`
	Scope        string     `json:"scope"`
	From         time.Time  `json:"from"`
	To           *time.Time `json:"to"`
	Reason       string     `json:"reason"`
	By           string     `json:"by"`
	ResumeReason string     `json:"resume_reason,omitempty"`
	ResumedBy    string     `json:"resumed_by,omitempty"`
}

// SuspensionsReport lists the suspended periods that overlap the report's
// period, oldest first.
func SuspensionsReport(d *ReportData, p Period) []SuspensionLine {
	out := []SuspensionLine{}
	for _, x := range d.Suspensions {
		if !x.At.Before(p.End()) || (x.ResumedAt != nil && x.ResumedAt.Before(p.Start())) {
			continue
		}
		out = append(out, SuspensionLine{Suspension: x.ID, Scope: x.Scope, From: x.At, To: x.ResumedAt, Reason: x.Reason,
			By: subjectOf(x.By), ResumeReason: x.ResumeReason, ResumedBy: subjectOf(x.ResumedBy)})
	}
	return out
}

// subjectOf names who acted, "" for nobody recorded.
func subjectOf(a *domain.Actor) string {
	if a == nil {
		return ""
	}
	return a.Subject
}

// SuspensionRowCSV is a suspensions report line's CSV row.
func SuspensionRowCSV(l SuspensionLine) []string {
	return []string{l.Suspension, l.Scope, timeText(&l.From), timeText(l.To), l.Reason, l.By, l.ResumeReason, l.ResumedBy}
}

func (f SalesFigures) row() []string {
	return []string{strconv.Itoa(f.Units), strconv.Itoa(f.UnitsSold), f.Stakes.String(), f.PrizesPaid.String(), f.PrizesOwed.String(),
		f.PrizesOutstanding.String(), f.TheoreticalReturn.String(), rateText(f.ActualReturn), strconv.Itoa(f.PlaysInProgress),
		f.StakesInPlay.String(), strconv.Itoa(f.PlaysSettled), strconv.Itoa(f.CompletedBySystem)}
}

func rateText(r *decimal.Decimal) string {
	if r == nil {
		return ""
	}
	return r.String()
}

func timeText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// BlockRowCSV is a blocks report line's CSV row.
func BlockRowCSV(l BlockLine) []string {
	return append([]string{l.Block, l.Emission, l.Price.String(), string(l.State), timeText(&l.OpenedAt), timeText(l.ClosedAt)}, l.row()...)
}

// EmissionRowCSV is an emissions report line's CSV row.
func EmissionRowCSV(l EmissionLine) []string {
	return append([]string{l.Emission, l.Price.String(), strconv.Itoa(l.Blocks), strconv.Itoa(l.Opened)}, l.row()...)
}

// DayRowCSV is a days report line's CSV row.
func DayRowCSV(l DayLine) []string {
	return []string{l.Day, strconv.FormatBool(l.Activity), strconv.Itoa(l.UnitsSold), l.Stakes.String(), l.PrizesPaid.String(),
		l.PrizesOwed.String(), l.Deposits.String(), l.Withdrawals.String(), rateText(l.TheoreticalReturn), rateText(l.ActualReturn),
		strconv.Itoa(l.PlaysSettled), strconv.Itoa(l.CompletedBySystem), strconv.Itoa(l.PlaysInProgress), l.StakesInPlay.String(),
		l.AdjustedCredits.String(), l.AdjustedDebits.String()}
}

// LiabilityRowCSV is a liability report line's CSV row.
func LiabilityRowCSV(l LiabilityLine) []string {
	return []string{l.Day, strconv.FormatBool(l.Activity), l.Liability.String(), l.Change.String()}
}

// WinRowCSV is a large-wins report line's CSV row.
func WinRowCSV(w Win) []string {
	return []string{w.Play, w.Player, w.Block, strconv.FormatUint(uint64(w.Unit), 10), w.Tier.ID(), w.Prize.String(), timeText(&w.At), strconv.FormatBool(w.BySystem)}
}

// SortWins orders wins oldest first, then by play.
func SortWins(ws []Win) {
	slices.SortFunc(ws, func(a, b Win) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(a.Play, b.Play)
	})
}

// The reports of the pack, by name.
const (
	ReportBlocks    = "blocks"
	ReportEmissions = "emissions"
	ReportDays      = "days"
	ReportLiability = "liability"
	ReportLargeWins = "large-wins"
	// ReportSuspensions lists the periods sales were suspended.
	ReportSuspensions = "suspensions"
	// ReportAdjustments lists the approved adjustments per day and kind.
	ReportAdjustments = "adjustments"
)

// ReportKinds lists the reports of the pack.
var ReportKinds = []string{ReportBlocks, ReportEmissions, ReportDays, ReportLiability, ReportLargeWins, ReportSuspensions, ReportAdjustments}

// ReportQuery asks for one report: its kind, its period (YYYY-MM-DD days,
// both included; empty from is the first day of activity, empty to is
// today), and for large wins the threshold and how many at most.
type ReportQuery struct {
	Kind      string
	From, To  string
	Threshold domain.Amount
	Limit     int
	// Now is the report's generation time (today's end of the period).
	Now time.Time
}

// Report is one report of the pack: what it covers, when it was generated
// and the stream position it reflects, so that it can be reproduced, and
// its rows. Its JSON keys are a contract: add, never rename.
type Report struct {
	Report       string    `json:"report"`
	Period       Period    `json:"period"`
	GeneratedAt  time.Time `json:"generated_at"`
	StreamSeq    uint64    `json:"stream_seq"`
	RulesVersion string    `json:"rules_version"`
	// Threshold and More are the large-wins report's: its threshold, and
	// whether its limit left wins out.
	Threshold *domain.Amount `json:"threshold,omitempty"`
	More      bool           `json:"more,omitempty"`
	Rows      any            `json:"rows"`
	csv       func(io.Writer) error
}

// WriteCSV writes the report's rows as CSV.
func (r *Report) WriteCSV(w io.Writer) error { return r.csv(w) }

// BuildReport reads what a report needs from a store, in one snapshot, and
// builds it.
func BuildReport(ctx context.Context, s Store, rules *domain.RuleSet, q ReportQuery) (*Report, error) {
	if !slices.Contains(ReportKinds, q.Kind) {
		return nil, errorsf(ErrInvalid, "report %q: want one of %v", q.Kind, ReportKinds)
	}
	d, err := s.ReportData(ctx)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", q.Kind, err)
	}
	p, err := NewPeriod(q.From, q.To, d.FirstDay(), q.Now)
	if err != nil {
		return nil, err
	}
	r := &Report{Report: q.Kind, Period: p, GeneratedAt: q.Now.UTC(), StreamSeq: d.Seq, RulesVersion: rules.Version}
	switch q.Kind {
	case ReportBlocks:
		rows := BlocksReport(&d, p)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, BlocksHeader, rows, BlockRowCSV) }
	case ReportEmissions:
		rows := EmissionsReport(&d, p)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, EmissionsHeader, rows, EmissionRowCSV) }
	case ReportDays:
		rows := DaysReport(&d, p, rules)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, DaysHeader, rows, DayRowCSV) }
	case ReportLiability:
		rows := LiabilityReport(&d, p)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, LiabilityHeader, rows, LiabilityRowCSV) }
	case ReportSuspensions:
		rows := SuspensionsReport(&d, p)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, SuspensionsHeader, rows, SuspensionRowCSV) }
	case ReportAdjustments:
		rows := AdjustmentsReport(&d, p)
		r.Rows, r.csv = rows, func(w io.Writer) error { return CSV(w, AdjustmentsHeader, rows, AdjustmentRowCSV) }
	case ReportLargeWins:
		wins, seq, more, err := s.LargeWins(ctx, LargeWinsQuery{Threshold: q.Threshold, From: p.Start(), To: p.End(), Limit: q.Limit})
		if err != nil {
			return nil, fmt.Errorf("report %s: %w", q.Kind, err)
		}
		threshold := q.Threshold
		r.Rows, r.StreamSeq, r.More, r.Threshold = wins, seq, more, &threshold
		r.csv = func(w io.Writer) error { return CSV(w, WinsHeader, wins, WinRowCSV) }
	}
	return r, nil
}
