package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/spf13/cobra"
)

// reportOptions are report's own flags.
type reportOptions struct {
	from, to, threshold string
	limit               int
	csv                 bool
}

// newReportCmd is the tresor report command.
func newReportCmd() *cobra.Command {
	var cfg Config
	var o reportOptions
	cmd := &cobra.Command{
		Use:   "report (" + strings.Join(projections.ReportKinds, "|") + ") [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--csv]",
		Short: "Print one report of the regulatory pack (docs/compliance.md), from the stream or the PostgreSQL projections",
		Long: "report builds one report of the pack — blocks, emissions, days, liability or large-wins — as the API's\n" +
			"GET /v1/reports/{kind} does: from the PostgreSQL projections with --database-url, otherwise by replaying the\n" +
			"stream (read-only) into memory. The JSON report names its period, when it was generated and the stream\n" +
			"position it reflects; with --csv the rows go to stdout and that identity to stderr.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.NATSURL == "" && cfg.Data == "" {
				return usagef("--data: empty data directory")
			}
			if !slices.Contains(projections.ReportKinds, args[0]) {
				return usagef("report %q: want one of %s", args[0], strings.Join(projections.ReportKinds, ", "))
			}
			return runReport(cmd.Context(), &cfg, args[0], o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	connectionFlag(f, &cfg.DatabaseURL, "database-url", "PostgreSQL URL of the projections to read instead of replaying the stream ($TRESOR_DATABASE_URL; put a password there or in PGPASSWORD)")
	f.StringVar(&o.from, "from", "", "first day of the period, YYYY-MM-DD (default: the first day of activity)")
	f.StringVar(&o.to, "to", "", "last day of the period, YYYY-MM-DD (default: today, UTC)")
	f.StringVar(&o.threshold, "threshold", "1000.00", "large-wins: the smallest prize listed, in euros")
	f.IntVar(&o.limit, "limit", 1000, fmt.Sprintf("large-wins: the most wins listed (1 to %d)", projections.LargeWinsMax))
	f.BoolVar(&o.csv, "csv", false, "print the rows as CSV, the report's identity on stderr")
	return cmd
}

// runReport opens the projections, builds the report and prints it.
func runReport(ctx context.Context, cfg *Config, kind string, o reportOptions, out, errOut io.Writer) error {
	threshold, err := domain.ParseAmount(o.threshold)
	if err != nil || threshold == 0 {
		return usagef("--threshold %q: want a positive amount of euros", o.threshold)
	}
	if o.limit < 1 || o.limit > projections.LargeWinsMax {
		return usagef("--limit %d: want 1 to %d", o.limit, projections.LargeWinsMax)
	}
	rules, err := domain.DefaultRules()
	if err != nil {
		return err
	}
	store, err := reportStore(ctx, cfg, rules)
	if err != nil {
		return err
	}
	defer store.Close()
	rep, err := projections.BuildReport(ctx, store, rules, projections.ReportQuery{Kind: kind, From: o.from, To: o.to,
		Threshold: threshold, Limit: o.limit, Now: time.Now()})
	if errors.Is(err, projections.ErrInvalid) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if !o.csv {
		return writeJSON(out, rep)
	}
	fmt.Fprintf(errOut, "report %s from %s to %s, generated %s at stream sequence %d\n", rep.Report, rep.Period.From, rep.Period.To,
		rep.GeneratedAt.Format(time.RFC3339), rep.StreamSeq)
	return rep.WriteCSV(out)
}

// reportStore returns the PostgreSQL projections, or an in-memory
// projection of the whole stream, read-only.
func reportStore(ctx context.Context, cfg *Config, rules *domain.RuleSet) (projections.Store, error) {
	if cfg.DatabaseURL != "" {
		return openProjections(ctx, cfg, rules)
	}
	st, err := openStreamReadOnly(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	head, err := st.store.LastSequence(ctx)
	if err != nil {
		return nil, err
	}
	mem := memstore.New(rules)
	if err := projections.NewRunner(eventSource{store: st.store}, mem).RunTo(ctx, head); err != nil {
		return nil, fmt.Errorf("project the stream: %w", err)
	}
	return mem, nil
}
