package projections

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

// reconciliationHeader is the CSV header of reconciliation exports. Its
// columns are a contract with finance's tools: add columns at the end only.
var reconciliationHeader = []string{"scope", "key", "units_sold", "sales", "prizes_paid", "prizes_owed",
	"prize_fund", "prize_fund_left", "house_margin", "difference"}

// WriteReconciliationCSV writes reconciliation rows as CSV (RFC 4180) with a
// header line; amounts are euros with two decimals, never floats.
func WriteReconciliationCSV(w io.Writer, rows []Reconciliation) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(reconciliationHeader); err != nil {
		return fmt.Errorf("write reconciliation csv: %w", err)
	}
	for _, r := range rows {
		rec := []string{string(r.Scope), r.Key, strconv.Itoa(r.UnitsSold), r.Sales.String(), r.PrizesPaid.String(),
			r.PrizesOwed.String(), r.PrizeFund.String(), r.PrizeFundLeft.String(), r.HouseMargin.String(), r.Difference.String()}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("write reconciliation csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write reconciliation csv: %w", err)
	}
	return nil
}

// HistoryCursor encodes a play's stake sequence as a history cursor, and
// ParseHistoryCursor reads it back. The cursor is opaque to clients; it is
// the key of keyset pagination, so a page never shifts when plays arrive.
func HistoryCursor(seq uint64) string { return strconv.FormatUint(seq, 10) }

// ParseHistoryCursor reads a cursor written by HistoryCursor; "" is the
// newest page and reads as 0.
func ParseHistoryCursor(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, errorsf(ErrInvalid, "history cursor %q", s)
	}
	return n, nil
}
