// Package cluster runs Tresor on a NATS cluster: one writer per chain,
// chosen by a lease in a JetStream KV bucket, warm standbys that follow the
// stream and take over when the lease expires, and any node answering
// commands by forwarding them to the writer over NATS request/reply (a
// micro service).
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/domain/codec"
	"github.com/fdj/tresor/settlement"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ErrNoWriter reports a command that no writer could take: nobody holds the
// lease (a takeover is under way) or the holder does not answer on the
// execute subject. Nothing was recorded. The API answers it 503
// unavailable with Retry-After.
var ErrNoWriter = fmt.Errorf("%w: no writer holds the lease; a takeover is under way", settlement.ErrNotReady)

// ServiceName is the micro service the writer serves.
const ServiceName = "tresor-writer"

// ForwardWaitMax bounds a forwarded command, on the forwarding node (its
// wait for the answer) and on the writer (its execution): a writer killed
// with the request in hand never answers, and the client then learns within
// seconds, not at the end of the API's own deadline, that it should retry
// with its key. A commit takes milliseconds, or up to the commit timeout
// (2s) when NATS loses a node.
const ForwardWaitMax = 5 * time.Second

// forwardInFlightMax bounds the forwarded commands the writer executes at
// once; past it, requests wait in the subscription's pending buffer.
const forwardInFlightMax = 4096

// ExecuteSubject is the prefix of the subjects the writers of chain answer
// commands on, one per lease term (TermSubject).
func ExecuteSubject(chain string) string { return ServiceName + "." + chain + ".execute" }

// TermSubject is the subject the writer of chain answers commands on while
// it holds the lease's term: a writer frozen past the TTL and resumed still
// serves its old term's subject until it notices, and must not be sent the
// commands meant for the next writer (it would swallow them, and its
// clients would wait for the lease to move again).
func TermSubject(chain string, term uint64) string {
	return ExecuteSubject(chain) + "." + strconv.FormatUint(term, 10)
}

// wireEvent is an event of a result on the wire: its type and payload, as
// on the stream.
type wireEvent struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

// wireResult is the writer's answer to a forwarded command.
type wireResult struct {
	Events []wireEvent       `json:"events,omitempty"`
	Seqs   []uint64          `json:"seqs,omitempty"`
	Replay *domain.KeyRecord `json:"replay,omitempty"`
	Error  *wireError        `json:"error,omitempty"`
	// LastSeq is the writer's last durable sequence when it answered: the
	// position a reader of the forwarding node waits for to see what the
	// answer was decided on (a retry's first result).
	LastSeq uint64 `json:"last_seq"`
}

// wireError is a refusal (a domain code) or why the writer could not take
// the command.
type wireError struct {
	Code    domain.Code `json:"code"`
	Message string      `json:"message"`
}

// Wire codes beside the domain's: the writer has stopped or is not ready
// (retry elsewhere shortly), the command ran out of time (it may have been
// recorded), or an internal error (logged on the writer).
const (
	wireUnavailable domain.Code = "unavailable"
	wireTimeout     domain.Code = "timeout"
)

// encodeResult puts a writer's answer on the wire.
func encodeResult(res settlement.Result, err error, lastSeq uint64) ([]byte, error) {
	out := wireResult{Seqs: res.Seqs, Replay: res.Replay, LastSeq: lastSeq}
	for _, e := range res.Events {
		p, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", e.EventType(), err)
		}
		out.Events = append(out.Events, wireEvent{Type: e.EventType(), Payload: p})
	}
	var de *domain.Error
	switch {
	case err == nil:
	case errors.As(err, &de):
		out.Error = &wireError{Code: de.Code, Message: de.Message}
	case errors.Is(err, settlement.ErrStopped), errors.Is(err, settlement.ErrNotReady):
		out.Error = &wireError{Code: wireUnavailable, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		out.Error = &wireError{Code: wireTimeout, Message: err.Error()}
	default:
		out.Error = &wireError{Code: domain.CodeInternal, Message: "internal error"}
	}
	return json.Marshal(out)
}

// decodeResult reads the writer's answer back into what Execute returns.
func decodeResult(data []byte) (settlement.Result, uint64, error) {
	var w wireResult
	if err := json.Unmarshal(data, &w); err != nil {
		return settlement.Result{}, 0, fmt.Errorf("decode the writer's answer: %w", err)
	}
	if e := w.Error; e != nil {
		switch e.Code {
		case wireUnavailable:
			return settlement.Result{}, w.LastSeq, fmt.Errorf("%w: the writer: %s", settlement.ErrNotReady, e.Message)
		case wireTimeout:
			return settlement.Result{}, w.LastSeq, fmt.Errorf("the writer: %s: %w", e.Message, context.DeadlineExceeded)
		case domain.CodeInternal:
			return settlement.Result{}, w.LastSeq, errors.New("the writer failed on the command (see its log)")
		}
		return settlement.Result{}, w.LastSeq, &domain.Error{Code: e.Code, Message: e.Message}
	}
	res := settlement.Result{Seqs: w.Seqs, Replay: w.Replay, At: w.LastSeq}
	for _, e := range w.Events {
		ev, err := domain.DecodeEvent(e.Type, e.Payload)
		if err != nil {
			return settlement.Result{}, 0, fmt.Errorf("decode the writer's answer: %w", err)
		}
		res.Events = append(res.Events, ev)
	}
	return res, w.LastSeq, nil
}

// Forwarder executes commands on the node holding the writer's lease, by
// NATS request/reply on the subject of the lease's term (SetTerm). It
// implements api.Writer.
type Forwarder struct {
	nc    *nats.Conn
	chain string
	// term is the lease's term as last seen, 0 while unknown.
	term atomic.Uint64
	// lastSeq is the highest writer sequence seen in an answer.
	lastSeq atomic.Uint64
}

// NewForwarder forwards the commands of chain over nc, to the writer of the
// term given to SetTerm.
func NewForwarder(nc *nats.Conn, chain string) *Forwarder {
	return &Forwarder{nc: nc, chain: chain}
}

// SetTerm sends the next commands to the writer of term (0: nobody holds
// the lease).
func (f *Forwarder) SetTerm(term uint64) { f.term.Store(term) }

// Execute implements api.Writer: the command goes to the writer of the
// current term with its client key inside, so a retry after a takeover is
// answered exactly once. Errors: *domain.Error for a refusal; ErrNoWriter
// when no term is known or no writer answers its subject (nothing
// recorded); settlement.ErrNotReady when the writer could not
// take it or the request could not be sent; context.DeadlineExceeded when
// no answer came in time (the command may have been recorded: retry with
// its key).
func (f *Forwarder) Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	data, err := codec.EncodeCommand(cmd)
	if err != nil {
		return settlement.Result{}, err
	}
	term := f.term.Load()
	if term == 0 {
		return settlement.Result{}, ErrNoWriter
	}
	// A request sent on a connection that is down, or that drops while
	// the writer has it, would wait for a reconnect or ForwardWaitMax:
	// the client should rather learn at once that it may retry with its
	// key (on another node).
	if !f.nc.IsConnected() {
		return settlement.Result{}, fmt.Errorf("%w: forward to the writer: the NATS connection is %s", settlement.ErrNotReady, f.nc.Status())
	}
	dropped := f.nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer f.nc.RemoveStatusListener(dropped)
	ctx, cancel := context.WithTimeout(ctx, ForwardWaitMax)
	defer cancel()
	rctx, drop := context.WithCancelCause(ctx)
	defer drop(nil)
	go func() {
		select {
		case st, ok := <-dropped:
			if ok {
				drop(fmt.Errorf("the NATS connection is %s", st))
			}
		case <-rctx.Done():
		}
	}()
	msg, err := f.nc.RequestWithContext(rctx, TermSubject(f.chain, term), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return settlement.Result{}, ErrNoWriter
	case ctx.Err() == nil && rctx.Err() != nil:
		return settlement.Result{}, fmt.Errorf("%w: forward to the writer: %v while it had the command: retry with its key", settlement.ErrNotReady, context.Cause(rctx))
	case ctx.Err() != nil:
		return settlement.Result{}, fmt.Errorf("forward to the writer: %w", ctx.Err())
	case err != nil:
		return settlement.Result{}, fmt.Errorf("%w: forward to the writer: %v", settlement.ErrNotReady, err)
	}
	res, last, err := decodeResult(msg.Data)
	raise(&f.lastSeq, last)
	return res, err
}

// raise raises v to seq when seq is larger, and returns v's value then.
func raise(v *atomic.Uint64, seq uint64) uint64 {
	for {
		cur := v.Load()
		if seq <= cur {
			return cur
		}
		if v.CompareAndSwap(cur, seq) {
			return seq
		}
	}
}

// LastSeq implements api.Writer: the writer's last durable sequence as its
// latest answer told.
func (f *Forwarder) LastSeq() uint64 { return f.lastSeq.Load() }

// Executor runs commands: the node's settlement writer (the API's Writer
// is the same method set).
type Executor interface {
	Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error)
	// LastSeq is the stream sequence of the last event known durable.
	LastSeq() uint64
}

// serveFlushMax bounds the wait for the server to confirm the writer's
// subscription; a connection that cannot answer in that time cannot serve
// the writer either.
const serveFlushMax = 2 * time.Second

// Serve answers the commands forwarded to chain's subject for the lease's
// term with w, each bounded by ForwardWaitMax, until the returned service
// is stopped. The writer node serves it only while it holds that term.
func Serve(nc *nats.Conn, chain string, term uint64, w Executor, log *slog.Logger) (micro.Service, error) {
	subject := TermSubject(chain, term)
	svc, err := micro.AddService(nc, micro.Config{Name: ServiceName, Version: "1.0.0",
		Description: "Tresor's writer: executes the commands of chain " + chain})
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", subject, err)
	}
	// Handlers of one subscription run one at a time: each command runs in
	// its own goroutine, so that the writer group-commits forwarded
	// commands as it does local ones.
	slots := make(chan struct{}, forwardInFlightMax)
	handler := micro.HandlerFunc(func(req micro.Request) {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			respond(req, w, log)
		}()
	})
	if err := svc.AddEndpoint("execute", handler, micro.WithEndpointSubject(subject)); err != nil {
		svc.Stop()
		return nil, fmt.Errorf("serve %s: %w", subject, err)
	}
	// The node says it is the writer once this returns: its subscription
	// must be on the server by then, or a command forwarded at once finds
	// no responder and its node reports a takeover under way.
	if err := nc.FlushTimeout(serveFlushMax); err != nil {
		svc.Stop()
		return nil, fmt.Errorf("serve %s: flush the subscription: %w", subject, err)
	}
	return svc, nil
}

// respond executes one forwarded command and answers it.
func respond(req micro.Request, w Executor, log *slog.Logger) {
	cmd, err := codec.DecodeCommand(req.Data())
	var res settlement.Result
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), ForwardWaitMax)
		res, err = w.Execute(ctx, cmd)
		cancel()
	}
	if err != nil && domain.CodeOf(err) == domain.CodeInternal && !errors.Is(err, settlement.ErrStopped) && !errors.Is(err, settlement.ErrNotReady) {
		log.Error("forwarded command failed", "err", err)
	}
	data, err := encodeResult(res, err, w.LastSeq())
	if err != nil {
		log.Error("encode a forwarded command's answer", "err", err)
		req.Error("500", "internal error", nil)
		return
	}
	if err := req.Respond(data); err != nil {
		log.Warn("answer a forwarded command", "err", err)
	}
}
