package domain

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
)

// defaultRuleSet is the regulation in force: « L'île au trésor », effective
// 13 July 2015, replacing the rules of 5 November 2009. It is data, checked
// at every load, so that a typo in a table stops Tresor instead of paying it.
//
//go:embed rulesets/ile-au-tresor-2015-07-13.json
var defaultRuleSet []byte

// ErrRules is wrapped by every error that refuses a rule set.
var ErrRules = errors.New("rule set refused")

// RuleSet is one version of the game's rules: the prices of Article 2, the
// block size, the prize table of Article 3 for each price and the payouts of
// Article 4.5. It is immutable once loaded and validated.
type RuleSet struct {
	// Game, Version, Effective, Replaces and Source identify the regulation.
	Game, Version, Effective, Replaces, Source string
	// BlockUnits is the number of game units in one block (450 000).
	BlockUnits int
	// PayoutRateMin and PayoutRateMax bound the share of sales paid out
	// (Code de la sécurité intérieure, art. D.322-10: 62 % to 75 %).
	PayoutRateMin, PayoutRateMax decimal.Decimal
	// Multipliers gives each winning tier's prize as a multiple of the stake.
	Multipliers [TierCount]int64
	// Tables holds one prize table per price, in the order of Article 3.
	Tables []PriceTable
}

// PriceTable is the Article 3 prize table of blocks of one price.
type PriceTable struct {
	// Article is the paragraph of Article 3 the table comes from ("3.2").
	Article string
	// Price is the stake of one unit of these blocks.
	Price Amount
	// Lots has one row per tier, in tier order; the TierNone row counts the
	// losing units of the block and pays nothing.
	Lots [TierCount]Lot
	// TotalLots and Total are the published totals of winning lots.
	TotalLots int
	Total     Amount
}

// Lot is one row of an Article 3 table: Count lots of Amount, Total in all.
type Lot struct {
	Tier   Tier
	Count  int
	Amount Amount
	Total  Amount
}

// DefaultRules loads and validates the embedded rule set in force.
func DefaultRules() (*RuleSet, error) { return LoadRules(defaultRuleSet) }

// ruleSetFile is the JSON shape of a rule set file.
type ruleSetFile struct {
	Game          string           `json:"game"`
	Version       string           `json:"version"`
	Effective     string           `json:"effective"`
	Replaces      string           `json:"replaces"`
	Source        string           `json:"source"`
	BlockUnits    int              `json:"block_units"`
	PayoutRateMin string           `json:"payout_rate_min_percent"`
	PayoutRateMax string           `json:"payout_rate_max_percent"`
	Multipliers   map[string]int64 `json:"multipliers"`
	PrizeTables   []tableFile      `json:"prize_tables"`
	Payouts       struct {
		Article string   `json:"article"`
		Prices  []string `json:"prices"`
		Rows    []struct {
			Tier    string   `json:"tier"`
			Amounts []string `json:"amounts"`
		} `json:"rows"`
	} `json:"payouts"`
}

// tableFile is one price's prize table in a rule set file.
type tableFile struct {
	Article   string    `json:"article"`
	Price     string    `json:"price"`
	Lots      []lotFile `json:"lots"`
	TotalLots int       `json:"total_lots"`
	Total     string    `json:"total"`
}

// lotFile is one row of a prize table.
type lotFile struct {
	Tier   string `json:"tier"`
	Count  int    `json:"count"`
	Amount string `json:"amount"`
	Total  string `json:"total"`
}

// rulesErr builds an error that refuses a rule set, naming where.
func rulesErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRules, fmt.Sprintf(format, args...))
}

// LoadRules reads a rule set file and validates it: every row total equals
// count × amount, every table's lot count and total equal the published
// figures, every lot amount equals the Article 4.5 payout for its price and
// the tier's multiplier × the price, the losing units fill the block, and
// the payout rate lies in the legal range. Any mismatch is an error wrapping
// ErrRules that names the row and both figures; nothing partial is returned.
func LoadRules(data []byte) (*RuleSet, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f ruleSetFile
	if err := dec.Decode(&f); err != nil {
		return nil, rulesErr("decode: %v", err)
	}
	r, err := ruleSetHeader(f)
	if err != nil {
		return nil, err
	}
	payouts, err := parsePayouts(f)
	if err != nil {
		return nil, err
	}
	if len(f.PrizeTables) == 0 {
		return nil, rulesErr("prize_tables: none")
	}
	for _, ft := range f.PrizeTables {
		t, err := r.priceTable(ft, payouts, f.Payouts.Article)
		if err != nil {
			return nil, err
		}
		r.Tables = append(r.Tables, t)
	}
	if len(payouts) != len(r.Tables) {
		return nil, rulesErr("Article %s lists %d prices, the prize tables %d", f.Payouts.Article, len(payouts), len(r.Tables))
	}
	return r, nil
}

// ruleSetHeader reads what a rule set says besides its tables: its
// identity, the block's size, the legal payout range and the tiers'
// multipliers.
func ruleSetHeader(f ruleSetFile) (*RuleSet, error) {
	r := &RuleSet{Game: f.Game, Version: f.Version, Effective: f.Effective, Replaces: f.Replaces, Source: f.Source, BlockUnits: f.BlockUnits}
	if r.BlockUnits <= 0 {
		return nil, rulesErr("block_units %d: must be positive", r.BlockUnits)
	}
	var err error
	if r.PayoutRateMin, err = decimal.NewFromString(f.PayoutRateMin); err != nil {
		return nil, rulesErr("payout_rate_min_percent %q: %v", f.PayoutRateMin, err)
	}
	if r.PayoutRateMax, err = decimal.NewFromString(f.PayoutRateMax); err != nil {
		return nil, rulesErr("payout_rate_max_percent %q: %v", f.PayoutRateMax, err)
	}
	r.PayoutRateMin = r.PayoutRateMin.Shift(-2)
	r.PayoutRateMax = r.PayoutRateMax.Shift(-2)
	for _, t := range Tiers[:TierNone] {
		m, ok := f.Multipliers[t.ID()]
		if !ok || m <= 0 {
			return nil, rulesErr("multipliers: tier %s has no positive multiplier", t)
		}
		r.Multipliers[t] = m
	}
	if len(f.Multipliers) != int(TierNone) {
		return nil, rulesErr("multipliers: %d entries, want %d (one per winning tier)", len(f.Multipliers), TierNone)
	}
	return r, nil
}

// priceTable reads one price's table and checks it against its published
// totals, the block's size, the legal payout range and the payouts of
// Article article; r holds the tables read before it.
func (r *RuleSet) priceTable(ft tableFile, payouts map[Amount]map[Tier]Amount, article string) (PriceTable, error) {
	t := PriceTable{Article: ft.Article, TotalLots: ft.TotalLots}
	where := "Article " + ft.Article
	var err error
	if t.Price, err = ParseAmount(ft.Price); err != nil || t.Price == 0 {
		return t, rulesErr("%s: price %q is not a positive amount", where, ft.Price)
	}
	if _, dup := r.Table(t.Price); dup == nil {
		return t, rulesErr("%s: a second table for price %s", where, t.Price)
	}
	if t.Total, err = ParseAmount(ft.Total); err != nil {
		return t, rulesErr("%s: total: %v", where, err)
	}
	if len(ft.Lots) != int(TierNone) {
		return t, rulesErr("%s: %d rows, want %d", where, len(ft.Lots), TierNone)
	}
	var lots int
	var total Amount
	for i, fl := range ft.Lots {
		lot, err := r.lot(fl, Tier(i), t.Price, where, payouts[t.Price], article)
		if err != nil {
			return t, err
		}
		t.Lots[lot.Tier] = lot
		lots += lot.Count
		total += lot.Total
	}
	if lots != t.TotalLots {
		return t, rulesErr("%s: the rows count %d lots, but the published total is %d", where, lots, t.TotalLots)
	}
	if total != t.Total {
		return t, rulesErr("%s: the rows add up to %s, but the published total is %s", where, total, t.Total)
	}
	if lots > r.BlockUnits {
		return t, rulesErr("%s: %d winning lots do not fit in a block of %d units", where, lots, r.BlockUnits)
	}
	t.Lots[TierNone] = Lot{Tier: TierNone, Count: r.BlockUnits - lots}
	if rate := t.PayoutRate(r.BlockUnits); rate.LessThan(r.PayoutRateMin) || rate.GreaterThan(r.PayoutRateMax) {
		return t, rulesErr("%s: payout rate %s %% outside the legal range %s–%s %%", where, rate.Shift(2), r.PayoutRateMin.Shift(2), r.PayoutRateMax.Shift(2))
	}
	return t, nil
}

// lot reads the row of a table that must be tier's and checks it: its
// total is count × amount, its amount the tier's multiplier × the price
// and what Article article pays (payouts, this price's).
func (r *RuleSet) lot(fl lotFile, want Tier, price Amount, where string, payouts map[Tier]Amount, article string) (Lot, error) {
	tier, err := ParseTier(fl.Tier)
	if err != nil || tier != want {
		return Lot{}, rulesErr("%s row %d: tier %q, want %s (rows in tier order)", where, int(want)+1, fl.Tier, want)
	}
	row := fmt.Sprintf("%s row %s", where, tier)
	lot := Lot{Tier: tier, Count: fl.Count}
	if lot.Amount, err = ParseAmount(fl.Amount); err != nil {
		return lot, rulesErr("%s: amount: %v", row, err)
	}
	if lot.Total, err = ParseAmount(fl.Total); err != nil {
		return lot, rulesErr("%s: total: %v", row, err)
	}
	if lot.Count <= 0 {
		return lot, rulesErr("%s: count %d must be positive", row, lot.Count)
	}
	if got := Amount(lot.Count) * lot.Amount; got != lot.Total {
		return lot, rulesErr("%s: %d × %s = %s, but the published total is %s", row, lot.Count, lot.Amount, got, lot.Total)
	}
	if want := Amount(r.Multipliers[tier]) * price; lot.Amount != want {
		return lot, rulesErr("%s: lot of %s, but %d × stake %s = %s", row, lot.Amount, r.Multipliers[tier], price, want)
	}
	if want, ok := payouts[tier]; !ok || lot.Amount != want {
		return lot, rulesErr("%s: lot of %s, but Article %s pays %s for this tier at %s", row, lot.Amount, article, want, price)
	}
	return lot, nil
}

// parsePayouts reads the Article 4.5 table into price → tier → amount.
func parsePayouts(f ruleSetFile) (map[Amount]map[Tier]Amount, error) {
	where := "Article " + f.Payouts.Article
	prices := make([]Amount, len(f.Payouts.Prices))
	out := make(map[Amount]map[Tier]Amount, len(prices))
	for i, p := range f.Payouts.Prices {
		v, err := ParseAmount(p)
		if err != nil {
			return nil, rulesErr("%s: price column %d: %v", where, i+1, err)
		}
		prices[i] = v
		out[v] = make(map[Tier]Amount, TierNone)
	}
	if len(f.Payouts.Rows) != int(TierNone) {
		return nil, rulesErr("%s: %d rows, want %d", where, len(f.Payouts.Rows), TierNone)
	}
	for _, row := range f.Payouts.Rows {
		tier, err := ParseTier(row.Tier)
		if err != nil || tier == TierNone {
			return nil, rulesErr("%s: row %q is not a winning tier", where, row.Tier)
		}
		if len(row.Amounts) != len(prices) {
			return nil, rulesErr("%s row %s: %d amounts for %d prices", where, tier, len(row.Amounts), len(prices))
		}
		for i, a := range row.Amounts {
			v, err := ParseAmount(a)
			if err != nil {
				return nil, rulesErr("%s row %s: %v", where, tier, err)
			}
			out[prices[i]][tier] = v
		}
	}
	return out, nil
}

// ErrUnknownPrice is returned for a price that has no prize table.
var ErrUnknownPrice = errors.New("no game at this price")

// Table returns the prize table of blocks of the given price, or an error
// wrapping ErrUnknownPrice.
func (r *RuleSet) Table(price Amount) (*PriceTable, error) {
	for i := range r.Tables {
		if r.Tables[i].Price == price {
			return &r.Tables[i], nil
		}
	}
	return nil, fmt.Errorf("%w: %s (prices are %s)", ErrUnknownPrice, price, r.priceList())
}

// priceList names the prices for error messages.
func (r *RuleSet) priceList() string {
	var b bytes.Buffer
	for i, t := range r.Tables {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t.Price.String())
	}
	return b.String()
}

// Prize returns what a unit of this table's price and the given tier pays.
func (t *PriceTable) Prize(tier Tier) Amount { return t.Lots[tier].Amount }

// LotCounts returns how many units of each tier a block holds, TierNone
// included; they add up to the block size. It is the multiset the deck
// shuffles.
func (t *PriceTable) LotCounts() [TierCount]int {
	var c [TierCount]int
	for i, l := range t.Lots {
		c[i] = l.Count
	}
	return c
}

// Sales returns what a sold-out block of this price takes in stakes.
func (t *PriceTable) Sales(blockUnits int) Amount { return Amount(blockUnits) * t.Price }

// PayoutRate returns the exact share of a sold-out block's sales paid out in
// prizes (0.7 for every table of the 2015 rules).
func (t *PriceTable) PayoutRate(blockUnits int) decimal.Decimal {
	return decimal.NewFromInt(int64(t.Total)).DivRound(decimal.NewFromInt(int64(t.Sales(blockUnits))), 8)
}
