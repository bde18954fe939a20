package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"

	"github.com/fdj/tresor/domain"
	"github.com/spf13/cobra"
)

// newDeckCmd is the tresor deck command.
func newDeckCmd() *cobra.Command {
	var priceText, seedText, out, rulesFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "deck --price P --seed HEX",
		Short: "Write a block's deck as CSV (unit,tier,prize) and print its commitment",
		Long: "deck rebuilds the deck of a block from its price and its 32-byte seed (as revealed by BlockClosed),\n" +
			"exactly as docs/deck-format.md specifies. The CSV goes to stdout (or --out), the commitment\n" +
			"(seed hash and Merkle root) to stderr, as JSON with --json.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules, err := loadRules(rulesFile)
			if err != nil {
				return err
			}
			price, err := domain.ParseAmount(priceText)
			if err != nil {
				return usagef("--price: %v", err)
			}
			table, err := rules.Table(price)
			if err != nil {
				return usagef("--price: %v", err)
			}
			seed, err := domain.ParseSeed(seedText)
			if err != nil {
				return usagef("--seed: %v", err)
			}
			deck := domain.BuildDeck(table.LotCounts(), seed)
			w := cmd.OutOrStdout()
			if out != "" && out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriterSize(w, 1<<16)
			bw.WriteString("unit,tier,prize\n")
			var line []byte
			for i, tier := range deck.Tiers {
				line = strconv.AppendInt(line[:0], int64(i), 10)
				line = append(line, ',')
				line = append(line, tier.ID()...)
				line = append(line, ',')
				line = append(line, table.Prize(tier).String()...)
				line = append(line, '\n')
				bw.Write(line)
			}
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("write deck: %w", err)
			}
			if asJSON {
				return writeJSON(cmd.ErrOrStderr(), struct {
					Price      domain.Amount     `json:"price"`
					Rules      string            `json:"rules_version"`
					Commitment domain.Commitment `json:"commitment"`
				}{price, rules.Version, deck.Commitment})
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "price %s, %d units\nseed_hash %x\nroot      %x\n", price, deck.Commitment.Units, deck.Commitment.SeedHash, deck.Commitment.Root)
			return nil
		},
	}
	cmd.Flags().StringVar(&priceText, "price", "", "unit price of the block: 0.50, 1 or 2")
	cmd.Flags().StringVar(&seedText, "seed", "", "the block's seed, 64 hex characters")
	cmd.Flags().StringVar(&out, "out", "", "write the CSV to this file instead of stdout")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the commitment as JSON")
	cmd.Flags().StringVar(&rulesFile, "rules", "", "rule set file (default: the embedded rule set in force)")
	cmd.MarkFlagRequired("price")
	cmd.MarkFlagRequired("seed")
	return cmd
}
