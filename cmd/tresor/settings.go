package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/fdj/tresor/domain"
	"github.com/spf13/cobra"
)

// newSettingsCmd is the tresor settings command.
func newSettingsCmd() *cobra.Command {
	var cfg Config
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "settings [--settings FILE] [--json]",
		Short: "Print the jurisdiction's settings (limit periods, raise delay, exclusion terms, adjustments' expiry) with their sources, validated",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := cfg.settings()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), settingsView{Settings: doc.Settings, Name: doc.Name, Sources: doc.Sources})
			}
			return printSettings(cmd.OutOrStdout(), doc)
		},
	}
	bindSettingsFlag(cmd, &cfg)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return cmd
}

// settingsView is the JSON shape of a jurisdiction file.
type settingsView struct {
	domain.Settings
	Name    string            `json:"name"`
	Sources map[string]string `json:"sources"`
}

func printSettings(w io.Writer, doc *domain.SettingsDocument) error {
	s := doc.Settings
	days := make([]string, len(s.LimitPeriodsDays))
	for i, d := range s.LimitPeriodsDays {
		days[i] = fmt.Sprint(d)
	}
	_, err := fmt.Fprintf(w, "%s — settings %s (%s)\n"+
		"limit periods offered: %s days\t(%s)\n"+
		"raised limit applies after: %d hours\t(%s)\n"+
		"deposit limit required before the first deposit: %t\t(%s)\n"+
		"stake limit required before the first stake: %t\t(%s)\n"+
		"self-exclusion term: %d hours to %d months\t(%s; %s)\n"+
		"an adjustment waits for its approval: %d hours\t(%s)\n",
		s.Jurisdiction, s.Version, doc.Name,
		strings.Join(days, ", "), doc.Sources["limit_periods_days"],
		s.LimitRaiseDelayHours, doc.Sources["limit_raise_delay_hours"],
		s.DepositLimitRequired, doc.Sources["deposit_limit_required"],
		s.StakeLimitRequired, doc.Sources["stake_limit_required"],
		s.SelfExclusionMinHours, s.SelfExclusionMaxMonths, doc.Sources["self_exclusion_min_hours"], doc.Sources["self_exclusion_max_months"],
		s.AdjustmentExpiryHours, doc.Sources["adjustment_expiry_hours"])
	return err
}
