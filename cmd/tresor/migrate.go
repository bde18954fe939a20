package main

import (
	"context"
	"fmt"

	"github.com/fdj/tresor/projections/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// newMigrateCmd is the tresor migrate command.
func newMigrateCmd() *cobra.Command {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "migrate --database-url URL",
		Short: "Apply the embedded PostgreSQL migrations of the projections (forward-only, idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := openDatabase(cmd.Context(), databaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pgstore.Migrate(cmd.Context(), pool, pgstore.NamespaceDefault); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "projections schema is up to date")
			return nil
		},
	}
	connectionFlag(cmd.Flags(), &databaseURL, "database-url", "PostgreSQL URL of the projections ($TRESOR_DATABASE_URL; put a password there or in PGPASSWORD, not on the command line)")
	return cmd
}

// openDatabase connects a pool to the projections' PostgreSQL database.
func openDatabase(ctx context.Context, url string) (*pgxpool.Pool, error) {
	if url == "" {
		return nil, usagef("--database-url: no PostgreSQL URL (or set $TRESOR_DATABASE_URL)")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the projections database: %w", err)
	}
	return pool, nil
}
