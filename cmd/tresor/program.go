package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/vault"
	"github.com/fdj/tresor/web"
)

// program is one run of serve: its components, in the order open opens
// them, and close closes them in reverse. What differs between the
// embedded default and a node of a cluster is the mode's.
type program struct {
	cfg     *Config
	log     *slog.Logger
	run     *serveRun
	started time.Time
	mode    mode

	tokens *api.Tokens
	rules  *domain.RuleSet
	pages  http.Handler
	// step is what the start is opening, the reason api.Opening gives.
	step atomic.Pointer[string]

	st          *stream
	store       projections.Store
	psnap       *projectionSnapshots
	runner      *projections.Runner
	gate        *writerGate
	rd          *readiness
	logs        *apiLogs
	revoked     *api.Revocations
	revocations *background
	projector   *projector
	// writing is set once the mode's writer side has opened.
	writing bool
}

// newProgram reads what a run needs before it opens anything: the token
// key, the rules and the pages.
func newProgram(cfg *Config, log *slog.Logger, run *serveRun) (*program, error) {
	p := &program{cfg: cfg, log: log, run: run, started: time.Now(), mode: &embedded{}}
	if cfg.NATSURL != "" {
		p.mode = &clusterNode{}
	}
	var err error
	if p.tokens, err = cfg.tokens(cfg.NATSURL == ""); err != nil {
		return nil, err
	}
	if p.rules, err = domain.DefaultRules(); err != nil {
		return nil, err
	}
	if p.pages, err = web.New(p.rules); err != nil {
		return nil, err
	}
	run.pages = p.pages
	return p, nil
}

// open opens the components in order: the mode's first step, the
// stream, the mode's hold on it, the read models, the significant-event
// log, the API, the projections, and the mode's writer side. It stops at
// the first that fails; close closes those opened.
func (p *program) open(ctx context.Context) error {
	p.opening("the event stream")
	if err := p.mode.beforeStream(p); err != nil {
		return err
	}
	if err := p.openStream(ctx); err != nil {
		return err
	}
	if err := p.mode.afterStream(ctx, p); err != nil {
		return err
	}
	if err := p.openReadModels(ctx); err != nil {
		return err
	}
	if err := p.openLogs(ctx); err != nil {
		return err
	}
	p.revoked = api.NewRevocations(p.cfg.RevocationSkew)
	p.revocations = startRevocations(ctx, p.st.store, p.revoked, p.log)
	p.serveAPI()
	p.projector = startProjector(ctx, p)
	return p.openWriter(ctx)
}

// wait returns the first reason to stop (awaitStop): nil for a requested
// stop.
func (p *program) wait(ctx context.Context) error { return p.mode.awaitStop(ctx, p) }

// awaitStop waits for the first reason to stop: the HTTP server or the
// projections failing, done closed (the embedded writer stopping, a node's
// name taken; why says what failed), the store refusing a write, or ctx;
// then it shuts the HTTP server down, but for a full disk: then the HTTP
// server answers unavailable while the rest stops and serve waits for
// space. It returns what failed, nil for a requested stop.
func (p *program) awaitStop(ctx context.Context, done <-chan struct{}, why func() error, store storeWatch) error {
	failed := store.cause(p.awaitFirst(ctx, done, why, store))
	if errors.Is(failed, eventstore.ErrNoSpace) {
		p.log.Error("stopping the writer: the store refused a write", "err", failed)
		store.hold()
		return failed
	}
	if failed != nil {
		p.log.Error("stopping", "err", failed)
	}
	p.log.Info("shutting down")
	if err := p.run.fr.shutdown(); err != nil && failed == nil {
		failed = err
	}
	return failed
}

// awaitFirst waits for the first reason to stop among awaitStop's and
// returns what failed, nil for ctx.
func (p *program) awaitFirst(ctx context.Context, done <-chan struct{}, why func() error, store storeWatch) error {
	select {
	case <-p.run.fr.served:
		return p.run.fr.failed()
	case err := <-p.projector.done:
		p.projector.done <- err
		return fmt.Errorf("projections: %w", err)
	case <-done:
		return why()
	case <-store.failed:
		return store.err()
	case <-ctx.Done():
		return nil
	}
}

// close closes what open opened, in reverse, and returns failed, or the
// writer side's failure to close: the writer side (queued commands
// commit, then the committer's closing seal), the projections once they
// have applied all of it, the significant-event log, the read models, the
// mode's hold on the stream, the stream. The HTTP server is serve's, not
// the program's: awaitStop shut it down first, or left it answering
// unavailable while serve waits for disk space.
func (p *program) close(ctx context.Context, failed error) error {
	switch {
	case p.writing:
		failed = p.mode.closeWriter(p, failed)
		p.stopped(ctx, failed)
	case p.projector != nil:
		p.projector.stop(ctx, false)
	}
	if p.revocations != nil {
		p.revocations.stop()
	}
	if p.logs != nil {
		p.logs.close()
	}
	if p.store != nil {
		p.store.Close()
	}
	p.mode.close(ctx)
	if p.st != nil {
		p.st.Close()
	}
	return failed
}

// opening names the step under way for api.Opening.
func (p *program) opening(what string) { p.step.Store(&what) }

// listen serves api.Opening on serve's HTTP server: the one a previous run
// left listening (a start again after a full disk), else a new one.
func (p *program) listen() error {
	opening := api.Opening(p.pages, func() string { return "opening " + *p.step.Load() })
	if p.run.fr != nil {
		p.run.fr.handle(opening)
		return nil
	}
	fr, err := listen(p.cfg, p.log, opening)
	p.run.fr = fr
	return err
}

// openStream opens the event stream (openStream).
func (p *program) openStream(ctx context.Context) error {
	st, err := openStream(ctx, p.cfg, p.log)
	if err != nil {
		return startFailed(ctx, err)
	}
	p.st = st
	p.log.Info("stream opened", "after", time.Since(p.started).Round(time.Millisecond))
	return nil
}

// openReadModels opens the projections' store and the snapshot bucket,
// and sets up what follows serve to readiness: the writer gate, the
// projections' runner and readiness itself.
func (p *program) openReadModels(ctx context.Context) error {
	p.opening("the read models")
	store, err := openProjections(ctx, p.cfg, p.rules)
	if err != nil {
		return startFailed(ctx, err)
	}
	p.store = store
	p.opening("the snapshot bucket")
	snaps, err := p.st.openSnapshots(ctx, p.cfg)
	if err != nil {
		return startFailed(ctx, err)
	}
	p.psnap = newProjectionSnapshots(snaps, store, p.rules, p.cfg, p.log)
	p.opening("the personal data keys")
	ring, err := p.st.openKeyring(ctx, p.cfg)
	if err != nil {
		return startFailed(ctx, err)
	}
	p.gate = &writerGate{}
	p.runner = projections.NewRunner(eventSource{store: p.st.store, log: p.log, forget: ring.Forget}, store)
	p.rd = &readiness{gate: p.gate, runner: p.runner, conn: p.st.store.Conn()}
	p.mode.watch(p)
	if p.psnap != nil {
		p.rd.rebuilding = p.psnap.store.Rebuilding
	}
	return nil
}

// openLogs opens the significant-event log and the access log and
// starts their recorders.
func (p *program) openLogs(ctx context.Context) error {
	p.opening("the significant-event and access logs")
	l, err := openLogs(ctx, p.cfg, p.st, p.log)
	if err != nil {
		return startFailed(ctx, err)
	}
	p.logs = l
	return nil
}

// serveAPI gives the HTTP server the API in place of api.Opening.
func (p *program) serveAPI() {
	p.run.fr.handle(api.NewServer(api.Config{Writer: p.gate, Readiness: p.rd.state, Store: p.store, Runner: p.runner, Tokens: p.tokens, Provider: p.run.provider, Logger: p.log, Pages: p.pages,
		Significant: p.logs.significant, AccessLog: p.logs.access, Revocations: p.revoked, Rules: p.rules, Clustered: p.cfg.NATSURL != "", RatePerSecond: p.cfg.TokenRate, RateBurst: p.cfg.TokenBurst,
		FreeBytes: p.dataFreeBytes(), Personal: p.st.keyring, Witness: p.witness()}))
}

// witness relays the vault's cosignatures when serve is given them.
func (p *program) witness() func() ([]byte, error) {
	if p.cfg.VaultCosignatures == "" {
		return nil
	}
	return vault.Mirror(p.cfg.VaultCosignatures, p.cfg.vaultPub)
}

// dataFreeBytes reads the free space under --data on the embedded default,
// where the stream lives; nil on a cluster, whose disks are the servers'.
func (p *program) dataFreeBytes() func() (int64, error) {
	if p.cfg.NATSURL != "" {
		return nil
	}
	return func() (int64, error) { return freeBytes(p.cfg.Data) }
}

// openWriter opens the mode's writer side. When it cannot open, nothing
// will take commands: the HTTP server shuts down before the projections
// stop.
func (p *program) openWriter(ctx context.Context) error {
	if err := p.mode.openWriter(ctx, p); err != nil {
		p.run.fr.shutdown()
		return startFailed(ctx, err)
	}
	p.writing = true
	return nil
}

// stopped lets the projections apply the stream to its end (the closing
// seal landed after the last command) when serve stops cleanly, so that an
// audit of them finds nothing missing, then stops them.
func (p *program) stopped(ctx context.Context, failed error) {
	if failed == nil {
		if err := catchUp(ctx, p.st, p.store); err != nil {
			p.log.Warn("projections stopped before the end of the stream", "err", err)
		}
	}
	p.projector.stop(ctx, failed == nil)
	p.log.Info("stopped")
}

// projector runs the projections' runner, and in memory the read models'
// snapshots, until stop.
type projector struct {
	psnap *projectionSnapshots
	// closingUnpaced says how the snapshot at a clean stop is stored.
	closingUnpaced bool
	ctx            context.Context
	cancel         context.CancelFunc
	done           chan error
	snapDone       chan struct{}
}

// startProjector starts p's runner. In memory, the read models start
// from their snapshot, then the runner applies what followed it.
func startProjector(ctx context.Context, p *program) *projector {
	pr := &projector{psnap: p.psnap, closingUnpaced: p.cfg.NATSURL == "", done: make(chan error, 1), snapDone: make(chan struct{})}
	pr.ctx, pr.cancel = context.WithCancel(context.WithoutCancel(ctx))
	runner, rd, psnap := p.runner, p.rd, p.psnap
	go func() {
		if psnap != nil {
			psnap.restore(pr.ctx)
			go psnap.warm(pr.ctx, func() bool { return rd.state().Status == api.StatusReady })
			go func() {
				defer close(pr.snapDone)
				psnap.run(pr.ctx, runner.Applied)
			}()
		} else {
			close(pr.snapDone)
		}
		pr.done <- runner.Run(pr.ctx)
	}()
	return pr
}

// stop stops the projections; after a clean stop, the in-memory read
// models take a snapshot, so the next start applies nothing. On the
// embedded default it is stored unpaced: the server is this process's,
// its writer has stopped. A node of a cluster keeps the pace: a standby
// may be taking over on the same servers.
func (pr *projector) stop(ctx context.Context, clean bool) {
	pr.cancel()
	<-pr.done
	<-pr.snapDone
	if pr.psnap != nil && clean {
		pr.psnap.save(ctx, pr.closingUnpaced)
	}
}

// background is a goroutine of the run: started with the context's
// values but not its cancellation, stopped by stop, which waits for it.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// goBackground runs run until stop.
func goBackground(ctx context.Context, run func(context.Context)) *background {
	b := &background{done: make(chan struct{})}
	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(b.done)
		run(ctx)
	}()
	return b
}

// stop stops the goroutine and waits for it.
func (b *background) stop() {
	b.cancel()
	<-b.done
}

// apiLogs are the API's own logs, each on a bounded stream of its own
// and written off the requests' path: the significant-event log and the
// access log.
type apiLogs struct {
	significant *api.Significant
	access      *api.AccessLog
	runs        []*background
}

// openLogs opens the API's logs and runs their recorders until close.
func openLogs(ctx context.Context, cfg *Config, st *stream, log *slog.Logger) (*apiLogs, error) {
	sigLog, err := eventstore.OpenSignificantLog(ctx, st.store.Conn(), significantConfig(cfg, cfg.SignificantMaxAge, log))
	if err != nil {
		return nil, err
	}
	accessLog, err := eventstore.OpenSignificantLog(ctx, st.store.Conn(), accessLogConfig(cfg, cfg.AccessLogMaxAge, log))
	if err != nil {
		return nil, err
	}
	l := &apiLogs{significant: api.NewSignificant(logStore{sigLog}, log), access: api.NewAccessLog(logStore{accessLog}, log)}
	l.runs = []*background{goBackground(ctx, l.significant.Run), goBackground(ctx, l.access.Run)}
	return l, nil
}

// significantConfig is the significant-event log's configuration, as
// serve opens it and a restore writes it.
func significantConfig(cfg *Config, maxAge time.Duration, log *slog.Logger) eventstore.SignificantConfig {
	return eventstore.SignificantConfig{Replicas: cfg.Replicas, MaxAge: maxAge, MaxBytes: significantBytes(cfg), Logger: log}
}

// accessLogConfig is the access log's configuration, as serve opens it
// and a restore writes it.
func accessLogConfig(cfg *Config, maxAge time.Duration, log *slog.Logger) eventstore.SignificantConfig {
	return eventstore.SignificantConfig{Stream: eventstore.AccessLogStream, SubjectPrefix: eventstore.AccessLogSubjectPrefix,
		Description: "Tresor access log: staff reads of players' data (bounded; not the event log)", KindTokens: 2,
		Replicas: cfg.Replicas, MaxAge: maxAge, MaxBytes: significantBytes(cfg), Logger: log}
}

// close stops the recorders, each once it has stored what is queued.
func (l *apiLogs) close() {
	for _, b := range l.runs {
		b.stop()
	}
}
