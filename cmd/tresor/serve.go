package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/spf13/cobra"
)

// shutdownMax bounds the wait for in-flight requests on SIGTERM.
const shutdownMax = 20 * time.Second

func init() {
	var cfg Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the settlement writer, the projections and the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return serve(ctx, &cfg, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	bindStoreFlags(cmd, &cfg)
	bindTokenFlag(cmd, &cfg)
	cmd.Flags().StringVar(&cfg.HTTP, "http", envOr("http", "127.0.0.1:8080"), "address the HTTP API listens on ($TRESOR_HTTP)")
	connectionFlag(cmd.Flags(), &cfg.DatabaseURL, "database-url", "PostgreSQL URL of the projections instead of memory ($TRESOR_DATABASE_URL; put a password there or in PGPASSWORD, not on the command line)")
	rootCmd.AddCommand(cmd)
}

// serve runs until ctx ends or its writer stops, then stops in the order
// that loses nothing acknowledged: the HTTP server (in-flight requests
// finish), the writer (queued commands commit), the projections, the
// stream. A stopped writer makes it return an error: exit status 1.
func serve(ctx context.Context, cfg *Config, log *slog.Logger) error {
	tokens, err := cfg.tokens()
	if err != nil {
		return err
	}
	rules, err := domain.DefaultRules()
	if err != nil {
		return err
	}
	store, err := openProjections(ctx, cfg, rules)
	if err != nil {
		return err
	}
	defer store.Close()
	st, err := openStream(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	w, err := st.openWriter(ctx, cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	runner := projections.NewRunner(eventSource{st.store}, store)
	runDone := make(chan error, 1)
	go func() { runDone <- runner.Run(runCtx) }()
	defer func() {
		cancelRun()
		<-runDone
	}()

	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return usagef("--http %s: %v", cfg.HTTP, err)
	}
	srv := &http.Server{
		Handler:           api.NewServer(api.Config{Writer: w, Store: store, Runner: runner, Tokens: tokens, Logger: log}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      api.RequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	log.Info("listening on " + ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var failed error
	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case err := <-runDone:
		runDone <- err
		return fmt.Errorf("projections: %w", err)
	case <-w.Done():
		// Fenced by another writer or cut off from the stream: every write
		// would now fail. Exit, so that the supervisor restarts Tresor and
		// the new writer rebuilds its state from the stream.
		failed = fmt.Errorf("settlement writer: %w", w.Err())
		log.Error("settlement writer stopped; shutting down", "err", w.Err())
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownMax)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return failed
}

// openProjections opens PostgreSQL projections (migrated) with
// --database-url, the in-memory store otherwise.
func openProjections(ctx context.Context, cfg *Config, rules *domain.RuleSet) (projections.Store, error) {
	if cfg.DatabaseURL == "" {
		return memstore.New(rules), nil
	}
	pool, err := openDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := pgstore.Migrate(ctx, pool, pgstore.NamespaceDefault); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate projections: %w", err)
	}
	s, err := pgstore.Open(ctx, pool, pgstore.Config{Rules: rules})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pooled{s, pool}, nil
}

// pooled closes the pool with the store.
type pooled struct {
	projections.Store
	pool interface{ Close() }
}

func (p pooled) Close() error {
	err := p.Store.Close()
	p.pool.Close()
	return err
}
