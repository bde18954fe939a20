package domain

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/shopspring/decimal"
)

// Amount is a sum of money in euro cents. Money is exact in Tresor: an Amount
// is an integer, never a float, and 12,50 € is Amount(1250).
type Amount int64

// AmountMax bounds any amount Tresor accepts from outside (10 billion euros):
// far above any real stake, deposit or prize, far below int64 overflow even
// when a whole emission's sales are summed.
const AmountMax Amount = 1_000_000_000_000

// ErrInvalidAmount is returned for any amount text that is not a plain,
// non-negative decimal with at most two decimals.
var ErrInvalidAmount = errors.New("invalid amount")

// amountPattern is the only shape of amount Tresor reads: digits, then
// optionally a point and one or two digits. It rejects signs, exponents,
// spaces and a third decimal before decimal ever sees the text.
var amountPattern = regexp.MustCompile(`^[0-9]{1,13}(\.[0-9]{1,2})?$`)

// ParseAmount reads an amount in euros such as "0.5", "0.50", "1" or "2.00".
// It refuses "0.499" (a third decimal), "-1", "1e3", "abc" and anything above
// AmountMax, with an error wrapping ErrInvalidAmount that quotes the input.
func ParseAmount(s string) (Amount, error) {
	if !amountPattern.MatchString(s) {
		return 0, fmt.Errorf("%w %q: want a non-negative number of euros with at most two decimals, like 1.50", ErrInvalidAmount, s)
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", ErrInvalidAmount, s, err)
	}
	cents := d.Shift(2)
	if !cents.IsInteger() || cents.GreaterThan(decimal.NewFromInt(int64(AmountMax))) {
		return 0, fmt.Errorf("%w %q: above the maximum %s", ErrInvalidAmount, s, AmountMax)
	}
	return Amount(cents.IntPart()), nil
}

// Decimal returns the amount in euros as an exact decimal.
func (a Amount) Decimal() decimal.Decimal { return decimal.New(int64(a), -2) }

// String prints the amount in euros with exactly two decimals: "0.50", "-3.00".
func (a Amount) String() string { return a.Decimal().StringFixed(2) }

// AppendText appends what String gives, without the decimal's
// allocations: the finance feed writes one or two amounts per message.
func (a Amount) AppendText(b []byte) ([]byte, error) {
	u := uint64(a)
	if a < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/100, 10)
	return append(b, '.', byte('0'+u/10%10), byte('0'+u%10)), nil
}

// MarshalText writes the amount as a decimal string with two decimals, so
// JSON carries "12.50", never a float.
func (a Amount) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an amount written by MarshalText or typed by a person.
// A leading minus is accepted here because journals and reports carry
// negative figures; inputs from outside go through ParseAmount.
func (a *Amount) UnmarshalText(b []byte) error {
	s := string(b)
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	v, err := ParseAmount(s)
	if err != nil {
		return err
	}
	if neg {
		v = -v
	}
	*a = v
	return nil
}
