package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/settlement"
)

// mode is what the embedded default and a node of a NATS cluster do each
// their own way. The program calls its methods in the order they are
// listed here.
type mode interface {
	// beforeStream opens what comes before the stream.
	beforeStream(p *program) error
	// afterStream opens what follows the stream, before the read models.
	afterStream(ctx context.Context, p *program) error
	// watch tells the writer gate and readiness what stops the mode.
	watch(p *program)
	// openWriter opens what takes commands and opens the gate to it.
	openWriter(ctx context.Context, p *program) error
	// awaitStop waits for the first reason to stop (program.awaitStop).
	awaitStop(ctx context.Context, p *program) error
	// closeWriter stops what openWriter opened and returns failed, or
	// why the stop itself failed.
	closeWriter(p *program, failed error) error
	// close releases what afterStream took, before the stream closes.
	close(ctx context.Context)
}

// embedded is the default: an in-process nats-server on --data and one
// settlement writer.
type embedded struct {
	w *settlement.Writer
}

func (*embedded) beforeStream(*program) error { return nil }

// afterStream listens once the stream is open: the stream locks the data
// directory, and a second serve refused there must touch nothing else,
// its port included.
func (*embedded) afterStream(_ context.Context, p *program) error { return p.listen() }

func (*embedded) watch(p *program) {
	p.gate.storeErr, p.rd.storeErr = p.st.embedded.WriteErr, p.st.embedded.WriteErr
}

func (e *embedded) openWriter(ctx context.Context, p *program) error {
	w, err := p.st.openWriter(ctx, p.cfg)
	if err != nil {
		return err
	}
	e.w = w
	p.gate.open(w)
	p.run.wrote = true
	p.rd.target.Store(w.LastSeq())
	p.log.Info("writer ready", "seq", w.LastSeq(), "after", time.Since(p.started).Round(time.Millisecond))
	go p.rd.logWhenReady(p.projector.ctx, p.log, p.started)
	return nil
}

// awaitStop stops for a stopped writer too: it was fenced by another or
// cut off from the stream, and every write would now fail. Exit, so that
// the supervisor restarts Tresor and the new writer rebuilds its state
// from the stream. A store that refused a write stops the writer too, at
// once rather than at the write's timeout.
func (e *embedded) awaitStop(ctx context.Context, p *program) error {
	w, fr := e.w, p.run.fr
	return p.awaitStop(ctx, w.Done(), func() error { return fmt.Errorf("settlement writer: %w", w.Err()) },
		storeWatch{p.st.embedded.WriteFailed(), p.st.embedded.WriteErr, func() {
			fr.handle(api.Unavailable(p.pages, func() string { return diskFullReason(p.cfg) }))
		}, func() bool {
			free, err := freeBytes(p.cfg.Data)
			return err == nil && free < diskFullFreeMax
		}})
}

// closeWriter stops the writer (queued commands commit), then the
// committer (its closing seal).
func (e *embedded) closeWriter(p *program, failed error) error {
	e.w.Close()
	if err := p.st.closeLog(); err != nil && failed == nil && e.w.Err() == nil {
		failed = fmt.Errorf("close the event log: %w", err)
	}
	return failed
}

func (*embedded) close(context.Context) {}

// clusterNode is serve on a NATS cluster: this process is one node among
// the writers of the chain (cluster.Node), writer or standby as the lease
// decides; a lost lease, a fenced writer or a lost NATS node sends it back
// to standby, never out of the process. A graceful stop commits what the
// writer was given, seals and releases the lease at once.
type clusterNode struct {
	claim *eventstore.NameClaim
	stop  context.CancelFunc
	done  chan struct{}
}

// beforeStream listens before anything opens (api.Opening meanwhile):
// each open may wait for the cluster's quorum.
func (*clusterNode) beforeStream(p *program) error { return p.listen() }

// afterStream claims the node's name on the cluster and marks the data
// directory as a node's.
func (c *clusterNode) afterStream(ctx context.Context, p *program) error {
	p.opening("the claim on the node name")
	claim, err := p.st.claimNodeName(ctx, p.cfg, p.log, p.started)
	if err != nil {
		return startFailed(ctx, err)
	}
	c.claim = claim
	return markClusterNode(p.cfg.Data, p.cfg.NodeName)
}

func (c *clusterNode) watch(p *program) { p.rd.claim = c.claim }

func (c *clusterNode) openWriter(ctx context.Context, p *program) error {
	node, err := p.st.openNode(ctx, p.cfg, p.log)
	if err == nil {
		var head uint64
		head, err = p.st.store.LastSequence(ctx)
		p.rd.target.Store(head)
	}
	if err != nil {
		return err
	}
	// Before the gate opens: state reads the node once it sees the
	// writer side open.
	p.rd.node = node
	p.gate.open(node)
	c.done = make(chan struct{})
	var nodeCtx context.Context
	nodeCtx, c.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(c.done)
		node.Run(nodeCtx)
	}()
	go p.rd.logWhenReady(nodeCtx, p.log, p.started)
	p.log.Info("node started", "node", p.cfg.NodeName, "stream_head", p.rd.target.Load())
	return nil
}

// awaitStop never stops for the node's writer; it stops for a node whose
// name another process claimed while it was cut off: two ran as one node.
func (c *clusterNode) awaitStop(ctx context.Context, p *program) error {
	return p.awaitStop(ctx, c.claim.Taken(), c.claim.Err, storeWatch{})
}

func (c *clusterNode) closeWriter(_ *program, failed error) error {
	c.stop()
	<-c.done
	return failed
}

// close releases the claim on the node's name.
func (c *clusterNode) close(ctx context.Context) {
	if c.claim != nil {
		c.claim.Release(context.WithoutCancel(ctx))
	}
}
