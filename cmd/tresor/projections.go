package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/settlement"
	"github.com/spf13/cobra"
)

// newProjectionsCmd is the tresor projections command.
func newProjectionsCmd() *cobra.Command {
	group := &cobra.Command{
		Use:   "projections",
		Short: "Manage the read models (balances, blocks, history, reconciliation)",
	}
	var cfg Config
	rebuild := &cobra.Command{
		Use:   "rebuild --database-url URL",
		Short: "Rebuild the PostgreSQL projections from the first event beside the live copy, then switch readers to it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validateStore(); err != nil {
				return err
			}
			return rebuildProjections(cmd.Context(), &cfg, cmd.ErrOrStderr())
		},
	}
	bindStoreFlags(rebuild, &cfg)
	connectionFlag(rebuild.Flags(), &cfg.DatabaseURL, "database-url", "PostgreSQL URL of the projections ($TRESOR_DATABASE_URL; put a password there or in PGPASSWORD, not on the command line)")
	group.AddCommand(rebuild)
	return group
}

// progressEvery is how often a rebuild prints its progress.
const progressEvery = time.Second

func rebuildProjections(ctx context.Context, cfg *Config, out io.Writer) error {
	pool, err := openDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rules, err := domain.DefaultRules()
	if err != nil {
		return err
	}
	// A rebuild only reads the stream, upcast as the writer reads it: it
	// runs beside tresor serve, through its read-only listener.
	reg, err := settlement.NewRegistry()
	if err != nil {
		return err
	}
	if err := requireStream(cfg); err != nil {
		return err
	}
	s, err := connectStream(ctx, cfg, eventstore.Config{ReadOnly: true, Registry: reg})
	if err != nil {
		return err
	}
	defer s.Close()
	start, last := time.Now(), time.Time{}
	gen, err := pgstore.Rebuild(ctx, pool, pgstore.Config{Rules: rules}, eventSource{store: s.store}, func(p pgstore.Progress) {
		if p.Switched || time.Since(last) >= progressEvery {
			last = time.Now()
			rate := float64(p.Applied) / max(time.Since(start).Seconds(), 1e-3)
			fmt.Fprintf(out, "generation %d: %d / %d events (%.0f events/s)\n", p.Generation, p.Applied, p.Head, rate)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "readers switched to generation %d in %s\n", gen, time.Since(start).Round(time.Millisecond))
	return nil
}

// eventSource adapts the event store to projections.Source: it follows the
// stream from a sequence and decodes each record into its domain event,
// with how many records of its append follow it; Seal and Void records,
// and the voided records of a torn append, carry no read-model data and
// come through as nil events, so that the projection's sequence stays
// gap-free. It rides through the loss of a NATS node or a
// change of the stream's leader (eventstore.FollowResuming), logging each
// resumption to log when not nil: a projection never stops serve for that.
type eventSource struct {
	store eventstore.Store
	log   *slog.Logger
	// forget, when set, is told of every data key an erasure read
	// destroys, so that this node's answers show the person's fields
	// erased from the erasure's position on (personal.Keyring.Forget).
	forget func(keyID string)
}

// The read side bounds a batch by the longest append the event store
// writes: the two limits must be one. A constant that overflows uint does
// not compile, so either being larger fails the build.
const _ = uint(projections.AppendMax-eventstore.BatchEventsMax) + uint(eventstore.BatchEventsMax-projections.AppendMax)

// Read implements projections.Source.
func (e eventSource) Read(ctx context.Context, from uint64, fn func(projections.Envelope) error) error {
	return eventstore.FollowResuming(ctx, e.store, from, func(r eventstore.RecordedEvent) error {
		env := projections.Envelope{Seq: r.Sequence, At: r.RecordedAt, AppendRemaining: r.AppendRemaining, Seal: r.Type == eventstore.SealType}
		if r.Voided {
			// Its append was cut short: not the ledger's, and the
			// append it belonged to never ends.
			env.AppendRemaining = 0
		}
		if r.LedgerFact() {
			ev, err := domain.DecodeEvent(r.Type, r.Payload)
			if err != nil {
				return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
			}
			env.Event = ev
			if x, ok := ev.(*domain.PersonalDataErased); ok && x.KeyID != "" && e.forget != nil {
				e.forget(x.KeyID)
			}
		}
		return fn(env)
	}, e.resumed)
}

// resumed logs a read that FollowResuming resumes.
func (e eventSource) resumed(err error) {
	if e.log != nil {
		e.log.Warn("projections: reading the stream again after an error", "err", err)
	}
}

// Head implements projections.Source.
func (e eventSource) Head(ctx context.Context) (uint64, error) { return e.store.LastSequence(ctx) }

var _ projections.Source = eventSource{}
