package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/internal/bench"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/pgstore"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// auditOptions are audit's own flags.
type auditOptions struct {
	file          string
	publicKey     string
	fromSeal      uint64
	databaseURL   string
	maxViolations int
	workers       int
	asJSON        bool
	quiet         bool
	yardstick     bool
	cpuProf       string
	inboxPrefix   string
	sealGapMax    uint64
	state         string
}

// auditGCPercent is the garbage collector's target during an audit: the
// heap may grow to five times what is live (a few hundred MB) between
// collections.
const auditGCPercent = 400

// errViolations makes audit exit 1 once its report is written.
var errViolations = errors.New("the audit found violations")

// newAuditCmd is the tresor audit command.
func newAuditCmd() *cobra.Command {
	var cfg Config
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit [--data DIR | --nats URL | --file EXPORT] [--public-key KEY] [--from-seal SEQ] [--state FILE]",
		Short: "Replay the stream or an export and verify everything: chain, seals, decks, plays, prizes, balances, Article 3",
		Long: "audit reads the stream (the embedded server on --data, or --nats URL), read-only, or an NDJSON\n" +
			"export (--file), from the first event or from a signed seal (--from-seal), and re-derives every\n" +
			"check of docs/audit.md from the events alone. It prints a summary and the first violations\n" +
			"(--json: the report of docs/audit.md) and exits 0 only when everything holds, 1 on violations,\n" +
			"2 on usage errors. --database-url also compares the PostgreSQL read models with the replay's.\n" +
			"--state FILE makes it incremental: it resumes after the state FILE holds (once the stream is\n" +
			"checked to still hold what it verified) and writes the new state there at the end.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd, &cfg); err != nil {
				return err
			}
			pub, err := o.key(&cfg)
			if err != nil {
				return err
			}
			return runProfiled(cmd, o.cpuProf, func(ctx context.Context) error {
				out, err := runAudit(ctx, &cfg, o, pub, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				if err := writeReport(cmd, o.asJSON, out); err != nil {
					return err
				}
				if !out.OK {
					return fmt.Errorf("%w: %d (%s)", errViolations, out.ViolationsTotal, codeList(out.ViolationCounts))
				}
				return nil
			})
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.file, "file", "", "audit an NDJSON export (tresor export) instead of a live stream")
	f.StringVar(&o.publicKey, "public-key", "", "the operator's Ed25519 seal public key: 64 hex digits, or a file holding them (the output of tresor seal-key as is) or the 32 raw bytes (default: derived from <data>/keys/seal.ed25519 when it exists)")
	f.Uint64Var(&o.fromSeal, "from-seal", 0, "start at the Seal event of this stream sequence instead of the first event")
	f.StringVar(&o.state, "state", "", "incremental audit: resume from the audit state this file holds when it exists, and write the state there at the end (docs/audit.md, \"Incremental audits\"); the file is the regulator's, never the operator's")
	f.StringVar(&o.databaseURL, "database-url", "", "also compare the PostgreSQL read models with the replay's (stream audits from the first event only); give a password in PGPASSWORD or ~/.pgpass, not here")
	f.IntVar(&o.maxViolations, "max-violations", audit.ViolationsMaxDefault, "how many violations to list (all are counted)")
	f.Uint64Var(&o.sealGapMax, "seal-gap-max", audit.SealGapMaxDefault, "most events of a chain allowed without a valid seal (the writer seals after every 10 000, later when busy)")
	f.IntVar(&o.workers, "workers", 0, "goroutines decoding events and running the pure checks (default: one per core)")
	f.BoolVar(&o.asJSON, "json", false, "print the report as one JSON object (keys: docs/audit.md)")
	f.BoolVar(&o.quiet, "quiet", false, "no progress on stderr")
	f.BoolVar(&o.yardstick, "yardstick", false, "then read the same range raw with an ordered consumer and report the audit's rate as a ratio of it")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the audit to this file (go tool pprof)")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"reply subject prefix with --nats: the one the NATS user may subscribe to (docs/export.md)")
	return cmd
}

// validate checks the flags' combinations: usage errors exit 2.
func (o *auditOptions) validate(cmd *cobra.Command, cfg *Config) error {
	f := cmd.Flags()
	if o.file != "" && (f.Changed("data") || f.Changed("nats")) {
		return usagef("--file: audit either an export or a stream (--data, --nats), not both")
	}
	if o.maxViolations < 1 || o.maxViolations > 1_000_000 {
		return usagef("--max-violations %d: want 1 to 1000000", o.maxViolations)
	}
	if o.sealGapMax < 1 {
		return usagef("--seal-gap-max %d: want 1 or more", o.sealGapMax)
	}
	if o.workers < 0 || o.workers > audit.WorkersMax {
		return usagef("--workers %d: want 0 to %d", o.workers, audit.WorkersMax)
	}
	if o.databaseURL != "" && (o.fromSeal != 0 || o.file != "") {
		return usagef("--database-url: the read models are compared after a replay of the stream from its first event, not with --from-seal or --file")
	}
	if o.state != "" {
		if o.databaseURL != "" {
			return usagef("--database-url: the read models are compared after a replay from the first event, not with --state")
		}
		if _, err := os.Stat(o.state); err == nil && o.fromSeal != 0 {
			return usagef("--from-seal: the state in %s says where this audit starts; --from-seal only starts a new series of audits", o.state)
		}
		if st, err := os.Stat(filepath.Dir(o.state)); err != nil || !st.IsDir() {
			return usagef("--state %s: no directory to write the state in", o.state)
		}
	}
	if o.yardstick && o.file != "" {
		return usagef("--yardstick: the yardstick reads a live stream, not --file")
	}
	if cfg.Data == "" && cfg.NATSURL == "" && o.file == "" {
		return usagef("--data: empty data directory")
	}
	return nil
}

// key reads the operator's seal public key.
func (o *auditOptions) key(cfg *Config) (ed25519.PublicKey, error) {
	if o.publicKey == "" {
		if o.file == "" && cfg.NATSURL == "" {
			cfg.SealKeyFile = filepath.Join(cfg.Data, "keys", "seal.ed25519")
			if _, err := os.Stat(cfg.SealKeyFile); err == nil {
				priv, err := cfg.sealKey(false)
				if err != nil {
					return nil, usagef("--public-key: %v", err)
				}
				return priv.Public().(ed25519.PublicKey), nil
			}
		}
		return nil, usagef("--public-key: the operator's seal public key is needed to verify the seals")
	}
	return parsePublicKey(o.publicKey)
}

// parsePublicKey reads the value of a --public-key flag: 64 hex digits, or
// a file holding them (the output of tresor seal-key) or the raw key.
func parsePublicKey(flag string) (ed25519.PublicKey, error) {
	text := strings.TrimSpace(flag)
	// 64 hex digits are the key; anything else, a path of 64 characters
	// too, is a file.
	if b, err := hex.DecodeString(text); err != nil || len(b) != ed25519.PublicKeySize {
		b, err := os.ReadFile(flag)
		if err != nil {
			return nil, usagef("--public-key: neither 64 hex digits nor a readable file: %v", err)
		}
		if len(b) == ed25519.PublicKeySize {
			return ed25519.PublicKey(b), nil
		}
		// The output of tresor seal-key, as it is: the key on its first
		// line, its key id on the second.
		text, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
		text = strings.TrimSpace(text)
	}
	b, err := hex.DecodeString(text)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, usagef("--public-key: want %d hex digits or a file of %d bytes", 2*ed25519.PublicKeySize, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// auditOutput is audit's report: the auditor's, plus where it read from
// and the yardstick. Its JSON keys are a contract (docs/audit.md).
type auditOutput struct {
	*audit.Report
	Source         string   `json:"source"`
	Yardstick      *float64 `json:"yardstick_events_per_second,omitempty"`      // float-ok: a rate
	YardstickRatio *float64 `json:"events_per_second_over_yardstick,omitempty"` // float-ok: a ratio
}

// firstSealKey refuses a key derived from the data directory's key file
// that is not the one the seals start with: after a rotation that file
// holds a later key, and the audit would report every early seal.
func firstSealKey(ctx context.Context, store *eventstore.NATSStore, pub ed25519.PublicKey) error {
	keys, err := store.SealKeys(ctx, settlement.Chain)
	if err != nil {
		return err
	}
	if keys.First != "" && keys.First != eventstore.KeyID(pub) {
		return usagef("--public-key: the seals start with key %s and the key file holds %s, a key they rotated to: give the first public key", keys.First, eventstore.KeyID(pub))
	}
	return nil
}

// runAudit opens the source, feeds the auditor, shows progress and builds
// the report.
func runAudit(ctx context.Context, cfg *Config, o auditOptions, pub ed25519.PublicKey, progress io.Writer) (*auditOutput, error) {
	rules, err := domain.DefaultRules()
	if err != nil {
		return nil, err
	}
	// An audit allocates for every event (the NATS client's headers, the
	// decoded payloads) and keeps little alive (the sold units of open
	// blocks): collecting less often buys throughput for memory it has.
	debug.SetGCPercent(auditGCPercent)
	acfg := audit.Config{Rules: rules, PublicKey: pub, ViolationsMax: o.maxViolations, Workers: o.workers, SealGapMax: o.sealGapMax}
	if o.databaseURL != "" {
		acfg.ReadModels = memstore.New(rules)
	}
	if o.file != "" {
		return auditFile(o, acfg, progress)
	}
	st, err := openStreamReadOnly(ctx, cfg, nats.CustomInboxPrefix(o.inboxPrefix))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if o.publicKey == "" && o.fromSeal == 0 {
		if err := firstSealKey(ctx, st.store, pub); err != nil {
			return nil, err
		}
	}
	out := &auditOutput{Source: "nats " + redactURL(cfg.NATSURL)}
	if cfg.NATSURL == "" {
		out.Source = "data " + cfg.Data
	}
	a, from, err := newAuditor(acfg, o, audit.StoreEvent(ctx, st.store))
	if err != nil {
		return nil, err
	}
	var last uint64
	if from != 0 {
		// The mark first: a live writer advances it after each batch the
		// stream holds, so the end read next reaches at least it.
		evidence, err := tailEvidence(cfg)
		if err != nil {
			return nil, err
		}
		stopProgress := showProgress(a, o.quiet, progress)
		last, err = audit.ReadStore(ctx, st.store, a, from)
		stopProgress()
		if err != nil {
			return nil, err
		}
		a.Truncated(last, evidence)
	}
	if out.Report, err = finishAudit(a, o, from); err != nil {
		return nil, err
	}
	if o.databaseURL != "" {
		if out.Report, err = compareReadModels(ctx, a, o, rules); err != nil {
			return nil, err
		}
	}
	if o.yardstick && from != 0 {
		rate, err := bench.MeasureOrderedRead(ctx, st.store, from, last)
		if err != nil {
			return nil, err
		}
		ratio := out.EventsPerSecond / rate
		out.Yardstick, out.YardstickRatio = &rate, &ratio
	}
	return out, nil
}

// tailEvidence is what the audit of a live stream knows, outside the
// stream, that it held: on the embedded default, the writer's high-water
// mark of acknowledged commits in the data directory.
func tailEvidence(cfg *Config) ([]eventstore.Evidence, error) {
	if cfg.NATSURL != "" {
		return nil, nil
	}
	mark, ok, err := eventstore.ReadHighWaterFile(filepath.Join(cfg.Data, highWaterFile))
	if err != nil || !ok {
		return nil, err
	}
	return []eventstore.Evidence{{Source: "the writer's high-water mark of acknowledged commits", Head: mark}}, nil
}

// auditFile audits an NDJSON export, from its first event or from a seal
// found in it (then the file is read twice).
func auditFile(o auditOptions, acfg audit.Config, progress io.Writer) (*auditOutput, error) {
	f, err := os.Open(o.file)
	if err != nil {
		return nil, usagef("--file: %v", err)
	}
	defer f.Close()
	a, from, err := newAuditor(acfg, o, audit.ExportEvent(f))
	if err != nil {
		return nil, err
	}
	if from != 0 {
		// Finding the seal or the saved heads read the file: audit it
		// from its start.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		stopProgress := showProgress(a, o.quiet, progress)
		_, err = audit.ReadExport(f, a, from)
		stopProgress()
		if err != nil {
			return nil, err
		}
	}
	r, err := finishAudit(a, o, from)
	if err != nil {
		return nil, err
	}
	return &auditOutput{Report: r, Source: "file " + o.file}, nil
}

// newAuditor starts an auditor after the saved state of --state when its
// file exists, else at the seal of --from-seal, else at the first event;
// at reads the event at a stream sequence. It returns the sequence to read
// from, 0 when the stream does not continue the saved state: the auditor
// holds a continuity_broken violation then, and nothing is to be read.
func newAuditor(acfg audit.Config, o auditOptions, at audit.EventAt) (*audit.Auditor, uint64, error) {
	if o.state != "" {
		st, err := audit.ReadStateFile(o.state)
		switch {
		case err == nil:
			return resumeAudit(acfg, o, st, at)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, 0, stateUnusable(o, err)
		}
	}
	if o.fromSeal == 0 {
		a, err := audit.New(acfg)
		return a, 1, err
	}
	seal, err := audit.SealAt(at, o.fromSeal)
	if err != nil {
		return nil, 0, usagef("--from-seal: %v", err)
	}
	return audit.NewFromSeal(acfg, seal)
}

// resumeAudit resumes an audit from a saved state once the stream is
// checked to continue it.
func resumeAudit(acfg audit.Config, o auditOptions, st *audit.State, at audit.EventAt) (*audit.Auditor, uint64, error) {
	a, err := audit.Resume(acfg, st)
	if err != nil {
		return nil, 0, stateUnusable(o, err)
	}
	ok, err := a.CheckContinuity(at)
	if err != nil {
		a.Finish()
		return nil, 0, err
	}
	if !ok {
		return a, 0, nil
	}
	return a, st.LastSequence + 1, nil
}

// stateUnusable explains a state file that cannot be used: nothing was
// audited, and what to do. A state written under other flags is a usage
// error; a corrupt one too, since the regulator alone keeps the file.
func stateUnusable(o auditOptions, err error) error {
	return usagef("--state %s: %v; nothing was audited: keep the file for inspection and rerun a full audit (without --state, or with a new file)", o.state, err)
}

// finishAudit ends an audit and, with --state, writes its state, unless
// the stream did not continue the saved one (from is 0): the old state is
// kept then, as the evidence of what was verified.
func finishAudit(a *audit.Auditor, o auditOptions, from uint64) (*audit.Report, error) {
	r := a.Finish()
	if o.state == "" || from == 0 {
		return r, nil
	}
	st, err := a.State()
	if err != nil {
		return nil, err
	}
	return r, audit.WriteStateFile(o.state, st)
}

// compareReadModels compares the PostgreSQL read models with the replay's.
func compareReadModels(ctx context.Context, a *audit.Auditor, o auditOptions, rules *domain.RuleSet) (*audit.Report, error) {
	pool, err := openDatabase(ctx, o.databaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	pg, err := pgstore.Open(ctx, pool, pgstore.Config{Rules: rules})
	if err != nil {
		return nil, err
	}
	defer pg.Close()
	return a.CompareReadModels(ctx, pg, o.maxViolations)
}

// showProgress prints the audit's progress on w every second until the
// returned function is called.
func showProgress(a *audit.Auditor, quiet bool, w io.Writer) func() {
	if quiet {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		start := time.Now()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := a.Checked()
				fmt.Fprintf(w, "audited %d events (%.0f events/s)\n", n, float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// codeList names the violation codes found, with their counts.
func codeList(counts map[audit.Code]int) string {
	var parts []string
	for c, n := range counts {
		parts = append(parts, fmt.Sprintf("%s ×%d", c, n))
	}
	slices.Sort(parts) // a stable line, run after run
	return strings.Join(parts, ", ")
}

func (r *auditOutput) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "source\t%s", r.Source)
	if r.FromSeal != 0 {
		fmt.Fprintf(tw, ", from the seal at sequence %d (%d events begun before it not checked in full)", r.FromSeal, r.Unanchored)
	}
	if r.FromState != 0 {
		fmt.Fprintf(tw, ", resumed after the saved state at sequence %d (%d new events checked)", r.FromState, r.NewEvents)
	}
	fmt.Fprintf(tw, "\nevents\t%d, last sequence %d, %d seals verified\n", r.Events, r.LastSequence, r.Seals)
	fmt.Fprintf(tw, "plays\t%d, %d settled\n", r.Plays, r.PlaysSettled)
	fmt.Fprintf(tw, "blocks\t%d opened, %d sold out, %d closed (seed checked)\n", r.Blocks.Opened, r.Blocks.SoldOut, r.Blocks.Closed)
	for _, p := range r.Prices {
		fmt.Fprintf(tw, "  %s €\t%d blocks, %d plays, stakes %s €, prizes %s €\n", p.Price, p.Blocks, p.Plays, p.Stakes, p.Prizes)
	}
	fmt.Fprintf(tw, "money\tdeposits %s €, withdrawals %s €, stakes %s €, prizes %s €, adjustments %s €; players hold %s €\n",
		r.Deposits, r.Withdrawals, r.Stakes, r.Prizes, r.Adjustments, r.PlayersBalance)
	fmt.Fprintf(tw, "elapsed\t%.2f s (%.0f events/s)\n", r.ElapsedSeconds, r.EventsPerSecond)
	if r.Yardstick != nil {
		fmt.Fprintf(tw, "yardstick\t%.0f events/s in a raw ordered read of the same range; the audit at %.2f of it\n", *r.Yardstick, *r.YardstickRatio)
	}
	if r.ReadModelsCompared {
		fmt.Fprintf(tw, "read models\tcompared with PostgreSQL\n")
	}
	if r.OK {
		fmt.Fprintf(tw, "result\tOK: every check holds\n")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "result\t%d violations (%s); the first %d:\n", r.ViolationsTotal, codeList(r.ViolationCounts), len(r.Violations))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sequence\tcode\tsubject\texpected\tfound\n")
	for _, v := range r.Violations {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", v.Sequence, v.Code, v.Subject, v.Expected, v.Found)
	}
	return tw.Flush()
}
