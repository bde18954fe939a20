package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/vault"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// vaultOptions are vault's flags.
type vaultOptions struct {
	source, sourceCreds, inboxPrefix string
	data, vaultNATS, http            string
	publicKey, keyFile, cpuProf      string
	sealOverdue, unreachableAfter    time.Duration
	sealGapMax                       uint64
}

// newVaultCmd is the tresor vault command.
func newVaultCmd() *cobra.Command {
	env["source"] = "TRESOR_VAULT_SOURCE"
	env["vault-nats"] = "TRESOR_VAULT_NATS"
	connectionFlags = append(connectionFlags, "source", "vault-nats")
	var o vaultOptions
	cmd := &cobra.Command{
		Use:   "vault --source URL [--source-creds FILE] --public-key KEY --data DIR --http ADDR",
		Short: "The regulator's live copy of the operator's stream, verified as it arrives, with alarms",
		Long: "vault follows the operator's stream (--source, with the regulator's read-only NATS user of docs/export.md),\n" +
			"appends every event as stored to a stream of its own (its embedded server in --data, or --vault-nats), and\n" +
			"verifies each with the incremental auditor (tresor audit --state's checks). It resumes after a stop where it\n" +
			"stopped, once the source is checked to still hold the copy's last event. Alarms (a violation, a gap, a seal\n" +
			"overdue, the source unreachable, a fork) are logged naming the position and the code, and shown on\n" +
			"GET /v1/vault/status and /metrics at --http (docs/vault.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			pub, err := parsePublicKey(o.publicKey)
			if err != nil {
				return err
			}
			return runProfiled(cmd, o.cpuProf, func(ctx context.Context) error {
				return runVault(ctx, o, pub, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
			})
		},
	}
	f := cmd.Flags()
	connectionFlag(f, &o.source, "source", "URL of the operator's NATS, as the regulator's read-only user ($TRESOR_VAULT_SOURCE; put a password there, not on the command line)")
	f.StringVar(&o.sourceCreds, "source-creds", "", "NATS credentials file (JWT and nkey) of the regulator's user, instead of a password in the URL")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1], "reply subject prefix the regulator's user may subscribe to on the source (docs/export.md)")
	f.StringVar(&o.publicKey, "public-key", "", "the operator's Ed25519 seal public key: 64 hex digits, or a file holding them (tresor seal-key's output)")
	f.StringVar(&o.data, "data", "./tresor-vault", "the vault's data directory: its embedded server's copy, its audit state, its cosignatures")
	f.StringVar(&o.keyFile, "key-file", "", "the vault's own Ed25519 key (a 32-byte seed) cosigning every seal it verifies; created when missing (default <data>/keys/vault.ed25519)")
	connectionFlag(f, &o.vaultNATS, "vault-nats", "URL of the regulator's own NATS for the copy instead of the embedded server ($TRESOR_VAULT_NATS)")
	f.StringVar(&o.http, "http", "127.0.0.1:8090", "address of GET /v1/vault/status and /metrics")
	f.DurationVar(&o.sealOverdue, "seal-overdue", vault.SealOverdueDefault, "alarm when events received this long ago are covered by no seal yet")
	f.DurationVar(&o.unreachableAfter, "unreachable-after", vault.UnreachableAfterDefault, "alarm when the source has not answered for this long")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	f.Uint64Var(&o.sealGapMax, "seal-gap-max", audit.SealGapMaxDefault, "most events of a chain allowed without a valid seal (as tresor audit's)")
	return cmd
}

// validate checks the flags before anything is opened.
func (o *vaultOptions) validate() error {
	switch {
	case o.source == "":
		return usagef("--source: the operator's NATS URL is required ($TRESOR_VAULT_SOURCE)")
	case o.publicKey == "":
		return usagef("--public-key: the operator's seal public key is needed to verify the seals")
	case o.data == "":
		return usagef("--data: empty data directory")
	case o.sealOverdue < time.Second || o.unreachableAfter < 0:
		return usagef("--seal-overdue %s, --unreachable-after %s: want at least 1s and not negative", o.sealOverdue, o.unreachableAfter)
	case o.sealGapMax < 1:
		return usagef("--seal-gap-max %d: want 1 or more", o.sealGapMax)
	}
	return nil
}

// vaultProgram is one run of the vault: the copy, the vault and its HTTP
// server, opened in that order, and the source the vault opens; closed in
// reverse.
type vaultProgram struct {
	o    vaultOptions
	log  *slog.Logger
	cp   *stream
	src  *eventstore.NATSStore
	v    *vault.Vault
	http *http.Server
}

// runVault runs the vault until ctx ends.
func runVault(ctx context.Context, o vaultOptions, pub []byte, log *slog.Logger) error {
	p := &vaultProgram{o: o, log: log}
	defer p.close()
	if err := p.open(ctx, pub); err != nil {
		return err
	}
	return p.v.Run(ctx)
}

// open opens the copy, the vault and the HTTP server; the vault opens the
// source.
func (p *vaultProgram) open(ctx context.Context, pub []byte) error {
	if err := os.MkdirAll(p.o.data, 0o700); err != nil {
		return fmt.Errorf("vault data directory: %w", err)
	}
	var err error
	copyCfg := &Config{Data: p.o.data, NATSURL: p.o.vaultNATS, Replicas: 1}
	if p.o.vaultNATS == "" {
		copyCfg.SyncInterval = copySyncInterval
	}
	if p.cp, err = connectStream(ctx, copyCfg, eventstore.Config{}); err != nil {
		return fmt.Errorf("the vault's copy: %w", err)
	}
	// The regulator's user may not delete the consumers it reads with
	// (the server drops them once idle): the client's complaint about it
	// goes to the debug log, not stderr.
	opts := []nats.Option{nats.CustomInboxPrefix(p.o.inboxPrefix), nats.Name("tresor-vault"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			p.log.Debug("vault: the source's connection", "err", err)
		})}
	if p.o.sourceCreds != "" {
		opts = append(opts, nats.UserCredentials(p.o.sourceCreds))
	}
	// The source is opened by the vault, which waits for it with its
	// alarm when the operator's NATS does not answer at the start.
	openSource := func(ctx context.Context) (*eventstore.NATSStore, error) {
		src, err := eventstore.Connect(ctx, p.o.source, eventstore.Config{ReadOnly: true}, opts...)
		if err == nil {
			p.src = src
		}
		return src, err
	}
	rules, err := domain.DefaultRules()
	if err != nil {
		return err
	}
	if p.o.keyFile == "" {
		p.o.keyFile = filepath.Join(p.o.data, "keys", "vault.ed25519")
	}
	seed, err := loadOrCreateKey(p.o.keyFile, ed25519.SeedSize, true)
	if err != nil {
		return fmt.Errorf("the vault's key: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	pubKey := key.Public().(ed25519.PublicKey)
	p.log.Info("vault: cosigning with its key", "public_key", hex.EncodeToString(pubKey), "key_id", eventstore.KeyID(pubKey))
	reg := prometheus.NewRegistry()
	cfg := vault.Config{OpenSource: openSource, Copy: p.cp.store, CosignKey: key, CosignFile: filepath.Join(p.o.data, "cosignatures.ndjson"),
		StateFile: filepath.Join(p.o.data, "audit.state"), PositionFile: filepath.Join(p.o.data, "vault-position.json"),
		Audit:       audit.Config{Rules: rules, PublicKey: pub, SealGapMax: p.o.sealGapMax},
		SealOverdue: p.o.sealOverdue, UnreachableAfter: p.o.unreachableAfter, Logger: p.log, Metrics: vault.NewMetrics(reg)}
	if p.o.vaultNATS == "" {
		// The embedded server takes larger batches, and commits one while
		// the next is sent, as for a restore; the regulator's own NATS
		// takes what a stock nats-server does.
		cfg.BatchEventsMax, cfg.CopyDepth = eventstore.CommitBatchEventsMax, restoreDepthEmbedded
		cfg.SyncCopy = (&treeSyncer{root: filepath.Join(p.o.data, "jetstream")}).sync
	}
	if p.v, err = vault.New(cfg); err != nil {
		return err
	}
	return p.serveHTTP(reg)
}

// copySyncInterval is the embedded copy's fsync interval: the vault syncs
// the copy's files itself before it says anything of the events
// (vault.Config.SyncCopy), so that its server need not sync each of them;
// short, so that the disk takes the stream as it comes and those syncs
// find little left to do.
const copySyncInterval = time.Second

// serveHTTP serves the status and the metrics.
func (p *vaultProgram) serveHTTP(reg *prometheus.Registry) error {
	ln, err := net.Listen("tcp", p.o.http)
	if err != nil {
		return usagef("--http %s: %v", p.o.http, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/vault/", p.v.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	p.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go p.http.Serve(ln)
	p.log.Info("vault: listening on " + ln.Addr().String())
	return nil
}

// close closes what open opened, in reverse.
func (p *vaultProgram) close() {
	if p.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.http.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("vault: stop the HTTP server", "err", err)
		}
	}
	if p.src != nil {
		p.src.Close()
	}
	if p.cp != nil {
		p.cp.Close()
	}
}
