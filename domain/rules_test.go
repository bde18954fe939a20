package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestDefaultRulesMatchArticle3(t *testing.T) {
	r, err := DefaultRules()
	if err != nil {
		t.Fatalf("DefaultRules: %v", err)
	}
	if r.BlockUnits != 450000 || r.Version != "2015-07-13" || r.Replaces != "2009-11-05" {
		t.Fatalf("rule set identity: units %d version %s replaces %s", r.BlockUnits, r.Version, r.Replaces)
	}
	wantLots := [TierCount]int{1, 3, 100, 1000, 500, 2000, 26000, 38000, 52000, 330396}
	for _, tc := range []struct {
		price, total string
		article      string
	}{
		{"0.50", "157500", "3.1"},
		{"1", "315000", "3.2"},
		{"2", "630000", "3.3"},
	} {
		price, _ := ParseAmount(tc.price)
		total, _ := ParseAmount(tc.total)
		tab, err := r.Table(price)
		if err != nil {
			t.Fatalf("Table(%s): %v", price, err)
		}
		if tab.Article != tc.article || tab.Total != total || tab.TotalLots != 119604 {
			t.Errorf("%s: article %s total %s lots %d", price, tab.Article, tab.Total, tab.TotalLots)
		}
		if got := tab.LotCounts(); got != wantLots {
			t.Errorf("%s: lots %v, want %v", price, got, wantLots)
		}
		if rate := tab.PayoutRate(r.BlockUnits); rate.String() != "0.7" {
			t.Errorf("%s: payout rate %s, want 0.7", price, rate)
		}
		var sum Amount
		for _, tier := range Tiers {
			want := Amount(r.Multipliers[tier]) * price
			if got := tab.Prize(tier); got != want {
				t.Errorf("%s %s: prize %s, want %s", price, tier, got, want)
			}
			sum += Amount(tab.Lots[tier].Count) * tab.Prize(tier)
		}
		if sum != total {
			t.Errorf("%s: lots pay %s, want %s", price, sum, total)
		}
	}
	if _, err := r.Table(300); !errors.Is(err, ErrUnknownPrice) {
		t.Errorf("Table(3.00): %v, want ErrUnknownPrice", err)
	}
}

// TestLoadRulesRefusesTablesThatDoNotAddUp changes one figure of the real
// rule set at a time and expects the load to fail naming the row and both
// figures.
func TestLoadRulesRefusesTablesThatDoNotAddUp(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		wantInError    []string
	}{
		{
			name:        "row total",
			old:         `{"tier": "monkey_x2", "count": 2000, "amount": "10", "total": "20000"}`,
			new:         `{"tier": "monkey_x2", "count": 2000, "amount": "10", "total": "20001"}`,
			wantInError: []string{"Article 3.2 row monkey_x2", "20000.00", "20001.00"},
		},
		{
			name:        "block total",
			old:         `"total": "630000"`,
			new:         `"total": "630001"`,
			wantInError: []string{"Article 3.3", "630000.00", "630001.00"},
		},
		{
			name:        "lot count total",
			old:         `"total_lots": 119604,` + "\n      \"total\": \"157500\"",
			new:         `"total_lots": 119605,` + "\n      \"total\": \"157500\"",
			wantInError: []string{"Article 3.1", "119604", "119605"},
		},
		{
			name:        "lot count and row total changed together",
			old:         `{"tier": "skull_x3", "count": 1000, "amount": "25", "total": "25000"}`,
			new:         `{"tier": "skull_x3", "count": 1001, "amount": "25", "total": "25025"}`,
			wantInError: []string{"Article 3.1", "119605", "119604"},
		},
		{
			name:        "lot amount against Article 4.5",
			old:         `{"tier": "sapphire_x2", "amounts": ["1.50", "3", "6"]}`,
			new:         `{"tier": "sapphire_x2", "amounts": ["1.50", "3", "7"]}`,
			wantInError: []string{"Article 3.3 row sapphire_x2", "6.00", "7.00"},
		},
		{
			name:        "multiplier",
			old:         `"chandelier_x1": 1`,
			new:         `"chandelier_x1": 2`,
			wantInError: []string{"row chandelier_x1", "0.50", "1.00"},
		},
		{
			name:        "payout rate outside 62-75 %",
			old:         `"payout_rate_max_percent": "75"`,
			new:         `"payout_rate_max_percent": "69"`,
			wantInError: []string{"payout rate 70", "62–69"},
		},
		{
			name:        "amount with three decimals",
			old:         `"amount": "12.5", "total": "6250"`,
			new:         `"amount": "12.505", "total": "6250"`,
			wantInError: []string{"row chandelier_x2", "12.505"},
		},
		{
			name:        "unknown field",
			old:         `"block_units": 450000,`,
			new:         `"block_units": 450000, "bonus": 1,`,
			wantInError: []string{"bonus"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// given the published rule set with one figure changed
			data := string(defaultRuleSet)
			if !strings.Contains(data, tc.old) {
				t.Fatalf("fixture %q not found in the rule set", tc.old)
			}
			data = strings.Replace(data, tc.old, tc.new, 1)
			// when it is loaded
			r, err := LoadRules([]byte(data))
			// then it is refused, naming the row and the figures
			if err == nil || r != nil {
				t.Fatalf("LoadRules accepted a broken table")
			}
			if !errors.Is(err, ErrRules) {
				t.Errorf("error %v does not wrap ErrRules", err)
			}
			for _, want := range tc.wantInError {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestParseAmount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Amount
	}{
		{"0.5", 50}, {"0.50", 50}, {"1", 100}, {"2.00", 200}, {"12.5", 1250}, {"0", 0}, {"10000000000", AmountMax},
	} {
		got, err := ParseAmount(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"0.499", "-1", "1e3", "abc", "", " 1", "1.", ".5", "+1", "1,50", "10000000000.01", "0x10", "NaN"} {
		if got, err := ParseAmount(in); !errors.Is(err, ErrInvalidAmount) || !strings.Contains(err.Error(), "invalid amount") {
			t.Errorf("ParseAmount(%q) = %d, %v; want ErrInvalidAmount", in, got, err)
		}
	}
}

func TestAmountTextRoundTrip(t *testing.T) {
	for _, a := range []Amount{0, 1, 50, 1250, -300, AmountMax} {
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Amount
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Errorf("%d → %s → %d, %v", a, b, back, err)
		}
	}
	if got := Amount(1250).String(); got != "12.50" {
		t.Errorf("String = %s, want 12.50", got)
	}
}

func TestTierAndSymbolNames(t *testing.T) {
	for _, tier := range Tiers {
		back, err := ParseTier(tier.ID())
		if err != nil || back != tier {
			t.Errorf("tier %d: id %q parses to %d, %v", tier, tier.ID(), back, err)
		}
	}
	if _, err := ParseTier("gold_x3"); err == nil {
		t.Error("ParseTier accepted an unknown id")
	}
	for _, s := range Symbols {
		back, err := ParseSymbol(s.String())
		if err != nil || back != s {
			t.Errorf("symbol %d: name %q parses to %d, %v", s, s, back, err)
		}
	}
}
