package audit

import (
	"context"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/projections"
)

// readModels feeds Config.ReadModels in batches, as a projection runner
// does, from the sequential stage.
type readModels struct {
	batch []projections.Envelope
	// err stops the feeding: a store that refused a batch holds a prefix
	// of the stream, and comparing it would only repeat the refusal.
	err error
}

// feedReadModels queues one record for the read models; seals go as nil
// events so that sequences stay contiguous.
func (a *Auditor) feedReadModels(ev *eventstore.RecordedEvent, e domain.Event) {
	rm := &a.rm
	if rm.err != nil {
		return
	}
	rm.batch = append(rm.batch, projections.Envelope{Seq: ev.Sequence, At: ev.RecordedAt, Event: e})
	if len(rm.batch) == projections.BatchMax {
		a.flushReadModels()
	}
}

func (a *Auditor) flushReadModels() {
	rm := &a.rm
	if rm.err != nil || len(rm.batch) == 0 {
		return
	}
	if err := a.cfg.ReadModels.Apply(context.Background(), rm.batch); err != nil {
		rm.err = err
		a.vs.add(Violation{Sequence: rm.batch[0].Seq, Code: CodeProjectionMismatch, Subject: "read models",
			Expected: "events the read models can apply", Found: err.Error()})
	}
	rm.batch = rm.batch[:0]
}
