package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/fdj/tresor/domain"
	"github.com/spf13/cobra"
)

// newRulesCmd is the tresor rules command.
func newRulesCmd() *cobra.Command {
	var asJSON bool
	var file string
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Print the rule set in force (prices, Article 3 tables, Article 4.5 payouts), validated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := loadRules(file)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rulesView(r))
			}
			return printRules(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rule set as JSON")
	cmd.Flags().StringVar(&file, "file", "", "validate and print this rule set file instead of the embedded one")
	return cmd
}

// loadRules loads the embedded rule set, or the one in file when set.
func loadRules(file string) (*domain.RuleSet, error) {
	if file == "" {
		return domain.DefaultRules()
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("read rule set: %v", err)
	}
	r, err := domain.LoadRules(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// rulesJSON is the machine-readable shape of a rule set: amounts are
// decimal strings, tiers their stable ids.
type rulesJSON struct {
	Game          string      `json:"game"`
	Version       string      `json:"version"`
	Effective     string      `json:"effective"`
	Replaces      string      `json:"replaces"`
	BlockUnits    int         `json:"block_units"`
	PayoutRateMin string      `json:"payout_rate_min"`
	PayoutRateMax string      `json:"payout_rate_max"`
	Tables        []tableJSON `json:"tables"`
}

type tableJSON struct {
	Article    string        `json:"article"`
	Price      domain.Amount `json:"price"`
	Lots       []lotJSON     `json:"lots"`
	TotalLots  int           `json:"total_lots"`
	Total      domain.Amount `json:"total"`
	Sales      domain.Amount `json:"sales"`
	PayoutRate string        `json:"payout_rate"`
}

type lotJSON struct {
	Tier       domain.Tier   `json:"tier"`
	Multiplier int64         `json:"multiplier"`
	Count      int           `json:"count"`
	Amount     domain.Amount `json:"amount"`
	Total      domain.Amount `json:"total"`
}

func rulesView(r *domain.RuleSet) rulesJSON {
	v := rulesJSON{
		Game: r.Game, Version: r.Version, Effective: r.Effective, Replaces: r.Replaces, BlockUnits: r.BlockUnits,
		PayoutRateMin: r.PayoutRateMin.String(), PayoutRateMax: r.PayoutRateMax.String(),
	}
	for i := range r.Tables {
		t := &r.Tables[i]
		tj := tableJSON{Article: t.Article, Price: t.Price, TotalLots: t.TotalLots, Total: t.Total,
			Sales: t.Sales(r.BlockUnits), PayoutRate: t.PayoutRate(r.BlockUnits).String()}
		for _, l := range t.Lots {
			tj.Lots = append(tj.Lots, lotJSON{Tier: l.Tier, Multiplier: r.Multipliers[l.Tier], Count: l.Count, Amount: l.Amount, Total: l.Total})
		}
		v.Tables = append(v.Tables, tj)
	}
	return v
}

func printRules(w io.Writer, r *domain.RuleSet) error {
	fmt.Fprintf(w, "%s — rules effective %s (replacing %s), blocks of %d units\n", r.Game, r.Effective, r.Replaces, r.BlockUnits)
	fmt.Fprintf(w, "legal payout rate %s–%s %%\n", r.PayoutRateMin.Shift(2), r.PayoutRateMax.Shift(2))
	for i := range r.Tables {
		t := &r.Tables[i]
		fmt.Fprintf(w, "\nArticle %s — units at %s €\n", t.Article, t.Price)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "tier\t× stake\tlots\tprize €\ttotal €\t")
		for _, l := range t.Lots {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t\n", l.Tier, r.Multipliers[l.Tier], l.Count, l.Amount, l.Total)
		}
		fmt.Fprintf(tw, "winning lots\t\t%d\t\t%s\t\n", t.TotalLots, t.Total)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "sales of a sold-out block %s €, payout rate %s %%\n", t.Sales(r.BlockUnits), t.PayoutRate(r.BlockUnits).Shift(2))
	}
	return nil
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
