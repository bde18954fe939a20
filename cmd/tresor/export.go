package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// exportOptions are export's own flags.
type exportOptions struct {
	out         string
	from, to    uint64
	resume      bool
	progress    bool
	inboxPrefix string
}

// newExportCmd is the tresor export command.
func newExportCmd() *cobra.Command {
	var cfg Config
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export --out FILE [--from SEQ | --resume] [--to SEQ]",
		Short: "Write the stream, or a range of it, as NDJSON that a regulator verifies without Tresor",
		Long: "export reads the stream (the embedded server on --data, or --nats URL) read-only, as stored,\n" +
			"and writes one JSON object per event: stream sequence, subject, envelope and payload, byte-exact\n" +
			"so that every hash recomputes from the file (docs/export.md). --out - writes stdout.\n" +
			"--resume continues an interrupted or older export after its last line, appending.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(&cfg, cmd.Flags().Changed("from")); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return export(ctx, &cfg, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	bindStreamFlags(cmd, &cfg)
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "file to write, - for stdout (required)")
	f.Uint64Var(&o.from, "from", 1, "first stream sequence to export")
	f.Uint64Var(&o.to, "to", 0, "last stream sequence to export (default: the last one when the export starts)")
	f.BoolVar(&o.resume, "resume", false, "append to --out after its last complete line (from 1 when it is missing or empty)")
	f.BoolVar(&o.progress, "progress", false, "report progress on stderr even when it is not a terminal")
	f.StringVar(&o.inboxPrefix, "inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"reply subject prefix with --nats: the one the NATS user may subscribe to (docs/export.md)")
	return cmd
}

// validate checks the flags before anything is opened.
func (o *exportOptions) validate(cfg *Config, fromSet bool) error {
	switch {
	case o.out == "":
		return usagef("--out: required (a file, or - for stdout)")
	case cfg.NATSURL == "" && cfg.Data == "":
		return usagef("--data: empty data directory")
	case o.from == 0:
		return usagef("--from 0: stream sequences start at 1")
	case o.to != 0 && o.to < o.from:
		return usagef("--to %d is before --from %d", o.to, o.from)
	case o.resume && o.out == "-":
		return usagef("--resume needs a file to continue, not stdout")
	case o.resume && fromSet:
		return usagef("--resume starts after the last line of --out: drop --from")
	}
	return nil
}

// exportSummary is what an export did.
type exportSummary struct {
	events  uint64
	first   uint64 // first sequence exported (0: none)
	last    uint64 // last sequence exported (0: none)
	elapsed time.Duration
}

// String is the one-line summary printed at the end.
func (s exportSummary) String() string {
	if s.events == 0 {
		return fmt.Sprintf("exported 0 events in %s", s.elapsed.Round(time.Millisecond))
	}
	rate := float64(s.events) / max(s.elapsed.Seconds(), 1e-3) // float-ok: a rate
	return fmt.Sprintf("exported %d events from sequence %d to last sequence %d in %s, %.0f events/s",
		s.events, s.first, s.last, s.elapsed.Round(time.Millisecond), rate)
}

// export writes the range o asks for to o.out.
func export(ctx context.Context, cfg *Config, o exportOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	st, err := openStreamReadOnly(ctx, cfg, nats.CustomInboxPrefix(o.inboxPrefix))
	if err != nil {
		return err
	}
	defer st.Close()
	out, err := openExportOut(o, stdout)
	if err != nil {
		return err
	}
	defer out.discard()
	last, err := st.store.WholeEnd(ctx, eventstore.WholeEndWait)
	if err != nil {
		return err
	}
	from, to := o.from, o.to
	switch {
	case to == 0:
		to = last
	case to > last:
		return usagef("--to %d: the stream ends at %d", to, last)
	}
	if o.resume {
		if from, err = resumePoint(ctx, st.store, out.tail, last); err != nil {
			return err
		}
	}
	var sum exportSummary
	x := eventstore.NewExportWriter(out)
	tick := progressReporter(o.progress, stderr, from, to)
	err = st.store.ReadStored(ctx, from, to, func(r eventstore.RecordedEvent) error {
		if err := x.Write(r); err != nil {
			return err
		}
		if sum.first == 0 {
			sum.first = r.Sequence
		}
		sum.events++
		sum.last = r.Sequence
		tick(r.Sequence)
		return nil
	})
	// What was read is written out even when the read stops early, so that
	// an export can be continued after its last line.
	err = errors.Join(err, x.Flush(), out.close())
	tick(0)
	sum.elapsed = time.Since(start)
	if err != nil {
		next := "--resume"
		if o.out == "-" {
			next = fmt.Sprintf("--from %d", max(sum.last+1, from))
		}
		return fmt.Errorf("%s, then stopped (continue with %s): %w", sum, next, err)
	}
	fmt.Fprintln(stderr, sum)
	return nil
}

// exportOut is the output of an export: a file, synced on close, or stdout.
type exportOut struct {
	io.Writer
	f *os.File // nil for stdout
	// tail is the last complete record of a resumed file, nil when the file
	// was empty.
	tail *eventstore.RecordedEvent
}

// openExportOut opens o.out. Resuming, it reads the last complete record and
// drops the incomplete line after it (an export killed mid-write);
// otherwise a non-empty file is refused, so that a forgotten --resume never
// overwrites an export.
func openExportOut(o exportOptions, stdout io.Writer) (*exportOut, error) {
	if o.out == "-" {
		return &exportOut{Writer: stdout}, nil
	}
	f, err := os.OpenFile(o.out, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open --out: %w", err)
	}
	out := &exportOut{Writer: f, f: f}
	size, err := f.Seek(0, io.SeekEnd)
	if err == nil && size > 0 && !o.resume {
		err = usagef("--out %s: not empty; --resume continues it, or remove it to export again", o.out)
	}
	if err == nil && o.resume {
		var end int64
		if out.tail, end, err = lastRecord(f, size); err == nil {
			err = f.Truncate(end)
		}
		if err == nil {
			_, err = f.Seek(end, io.SeekStart)
		}
		if err != nil {
			err = fmt.Errorf("resume %s: %w", o.out, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return out, nil
}

// close syncs and closes the file: an export is on disk when it says so.
func (o *exportOut) close() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	return errors.Join(f.Sync(), f.Close())
}

// discard closes the file if close was not reached.
func (o *exportOut) discard() {
	if o.f != nil {
		o.f.Close()
	}
}

// lastRecord parses the last complete line of an export of size bytes and
// returns it (nil for an empty file) and the offset just after it: bytes
// past it are an incomplete line that resuming overwrites.
func lastRecord(f *os.File, size int64) (*eventstore.RecordedEvent, int64, error) {
	window := min(size, eventstore.ExportLineMax+2)
	buf := make([]byte, window)
	if _, err := f.ReadAt(buf, size-window); err != nil {
		return nil, 0, err
	}
	end := bytes.LastIndexByte(buf, '\n') + 1 // 0: no complete line in the window
	if end == 0 {
		if window == size {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("no line end in the last %d bytes: not an export", window)
	}
	begin := bytes.LastIndexByte(buf[:end-1], '\n') + 1
	if begin == 0 && window < size {
		return nil, 0, fmt.Errorf("last line longer than %d bytes: not an export", eventstore.ExportLineMax)
	}
	var rec eventstore.RecordedEvent
	if err := eventstore.ReadExport(bytes.NewReader(buf[begin:end]), func(r eventstore.RecordedEvent) error {
		rec = r
		return nil
	}); err != nil {
		return nil, 0, err
	}
	return &rec, size - window + int64(end), nil
}

// resumePoint returns the sequence after tail, the last record of the file
// being resumed (1 for an empty file), once it is sure that the file is an
// export of this very stream, whose last sequence is last: its last record
// is the stored event at its sequence.
func resumePoint(ctx context.Context, store *eventstore.NATSStore, tail *eventstore.RecordedEvent, last uint64) (uint64, error) {
	if tail == nil {
		return 1, nil
	}
	if tail.Sequence > last {
		return 0, fmt.Errorf("resume after sequence %d: the stream ends at %d: not an export of this stream", tail.Sequence, last)
	}
	var stored eventstore.RecordedEvent
	if err := store.ReadStored(ctx, tail.Sequence, tail.Sequence, func(r eventstore.RecordedEvent) error {
		stored = r
		return nil
	}); err != nil {
		return 0, fmt.Errorf("resume after sequence %d: %w", tail.Sequence, err)
	}
	if stored.Hash != tail.Hash || stored.ID != tail.ID {
		return 0, fmt.Errorf("resume after sequence %d: the file holds event %s with hash %s there, the stream %s with hash %s: not an export of this stream",
			tail.Sequence, tail.ID, tail.Hash, stored.ID, stored.Hash)
	}
	return tail.Sequence + 1, nil
}

// progressBarStep is how many events an export writes between two updates
// of its progress bar.
const progressBarStep = 1000

// progressEveryExport is how often an export prints a progress line when
// stderr is not a terminal.
const progressEveryExport = time.Second

// progressReporter returns the function export calls with each sequence
// written, and with 0 at the end: a progress bar on a terminal, a line
// every second with force elsewhere, nothing otherwise.
func progressReporter(force bool, stderr io.Writer, from, to uint64) func(seq uint64) {
	total := int64(to) - int64(from) + 1
	if isTerminal(stderr) && total > 0 {
		bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("export"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"),
			progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
		return func(seq uint64) {
			switch done := seq - from + 1; {
			case seq == 0:
				bar.Finish()
			case done%progressBarStep == 0: // the bar costs too much per event
				bar.Set64(int64(done))
			}
		}
	}
	if !force {
		return func(uint64) {}
	}
	start := time.Now()
	var next time.Time
	return func(seq uint64) {
		if seq == 0 || time.Now().Before(next) {
			return
		}
		next = time.Now().Add(progressEveryExport)
		done := seq - from + 1
		rate := float64(done) / max(time.Since(start).Seconds(), 1e-3) // float-ok: a rate
		fmt.Fprintf(stderr, "export: %d / %d events, at sequence %d (%.0f events/s)\n", done, total, seq, rate)
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
