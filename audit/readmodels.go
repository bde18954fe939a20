package audit

import (
	"context"
	"fmt"

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

// CompareReadModels compares the read models the replay derived
// (Config.ReadModels) with the operator's, row by row, after Finish: each
// difference is a projection_mismatch violation, at most max of them. The
// operator's store must be at the same stream position as the audit. It
// returns the report with the differences added, or an error when the
// stores could not be read.
func (a *Auditor) CompareReadModels(ctx context.Context, got projections.Store, max int) (*Report, error) {
	if a.cfg.ReadModels == nil || !a.done {
		return nil, fmt.Errorf("audit: compare read models after Finish, with Config.ReadModels set")
	}
	diffs, err := projections.Diff(ctx, a.cfg.ReadModels, got, max)
	if err != nil {
		return nil, fmt.Errorf("audit: compare read models: %w", err)
	}
	for _, d := range diffs {
		a.vs.add(Violation{Code: CodeProjectionMismatch, Subject: d.Model + " " + d.Key + " " + d.Field, Expected: d.Want, Found: d.Got})
	}
	a.compared = true
	return a.report(), nil
}
