package domain

import (
	"math"
	"math/rand/v2"
	"testing"
)

// AppendText writes exactly what String writes, for the finance feed's
// payloads to stay byte for byte what encoding/json gave.
func TestAmountAppendTextIsString(t *testing.T) {
	amounts := []Amount{0, 1, 9, 10, 99, 100, 101, 1250, -1, -5, -99, -100, -1250, AmountMax, -AmountMax, math.MaxInt64, math.MinInt64}
	for range 10_000 {
		amounts = append(amounts, Amount(rand.Int64N(2*int64(AmountMax))-int64(AmountMax)))
	}
	for _, a := range amounts {
		got, err := a.AppendText([]byte("x"))
		if err != nil || string(got) != "x"+a.String() {
			t.Fatalf("Amount(%d).AppendText = %q, %v; String = %q", int64(a), got, err, a.String())
		}
	}
}
