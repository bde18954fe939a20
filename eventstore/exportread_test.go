package eventstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// readHashed reads file with ReadExportHashed, keeping every event and
// hash handed on, until stop (0: never) events are read.
func readHashed(file []byte, stop int) ([]eventstore.RecordedEvent, []eventstore.Hash, error) {
	var evs []eventstore.RecordedEvent
	var hashes []eventstore.Hash
	err := eventstore.ReadExportHashed(bytes.NewReader(file), func(ev eventstore.RecordedEvent, h eventstore.Hash) error {
		evs, hashes = append(evs, ev), append(hashes, h)
		if len(evs) == stop {
			return errStopped
		}
		return nil
	})
	return evs, hashes, err
}

var errStopped = errors.New("stopped by the caller")

// realExport writes a real stream of a few thousand events, seals
// included, and returns its events and their export.
func realExport(tb testing.TB) ([]eventstore.RecordedEvent, []byte) {
	tb.Helper()
	srv := eventstoretest.RunEmbedded(tb, tb.TempDir())
	writeRealStream(tb, eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{}), 1500)
	reader := eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{ReadOnly: true})
	evs := eventstoretest.ReadAll(tb, reader)
	return evs, exportStored(tb, reader, 1, evs[len(evs)-1].Sequence)
}

// ReadExportHashed reads, over several chunks, the events ReadExport
// reads, in the same order, each with its hash computed; a malformed
// line in the middle is named by its number once every line before it
// was handed on, and the caller's error stops the read as is.
func TestReadExportHashedReadsAsReadExport(t *testing.T) {
	want, file := realExport(t)
	got, hashes, err := readHashed(file, 0)
	if err != nil || !reflect.DeepEqual(got, readExport(t, file)) {
		t.Fatalf("read %d events (%v), ReadExport %d", len(got), err, len(want))
	}
	for i := range got {
		if hashes[i] != eventstore.ComputeHash(&got[i]) || hashes[i] != want[i].Hash {
			t.Fatalf("sequence %d: hash %s handed on, %s stored", got[i].Sequence, hashes[i], want[i].Hash)
		}
	}

	lines := bytes.SplitAfter(file, []byte("\n"))
	bad := len(lines) - 700 // past the first chunk
	broken := bytes.Join(append(append(lines[:bad-1:bad-1], []byte("{\"sequence\":0}\n")), lines[bad:]...), nil)
	got, _, err = readHashed(broken, 0)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("export line %d: ", bad)) || len(got) != bad-1 {
		t.Fatalf("a malformed line %d: %v after %d events", bad, err, len(got))
	}
	got, _, err = readHashed(file, 1100)
	if !errors.Is(err, errStopped) || len(got) != 1100 {
		t.Fatalf("stopped at 1 100 events: %v after %d", err, len(got))
	}
}

// A ParallelExportWriter writes the ExportWriter's bytes over several
// chunks, and an event it cannot write is its error at the latest on
// Close.
func TestParallelExportWriterWritesTheExportWritersBytes(t *testing.T) {
	evs, want := realExport(t)
	var got bytes.Buffer
	x := eventstore.NewParallelExportWriter(&got, "tresor")
	for _, ev := range evs {
		if err := x.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("%d bytes written (%v), the ExportWriter's %d", got.Len(), err, len(want))
	}

	bad := evs[1200]
	bad.ID = "\xff"
	x = eventstore.NewParallelExportWriter(io.Discard, "tresor")
	var err error
	for _, ev := range append(append(evs[:1200:1200], bad), evs[1201:]...) {
		if err = x.Write(ev); err != nil {
			break
		}
	}
	err = errors.Join(err, x.Close())
	if !errors.Is(err, eventstore.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("export sequence %d", bad.Sequence)) {
		t.Fatalf("an id that is not UTF-8: %v", err)
	}
}

// ReadExportHashed takes a payload laid out verbatim without checking its
// JSON when its hash matches (the bytes the chain recorded, re-appended
// as they are), where ReadExport refuses it; the same payload under a
// hash that does not match is refused as ReadExport refuses it, naming
// its line.
func TestReadExportHashedChecksThePayloadsJSONWhenTheHashFails(t *testing.T) {
	ev := vectorEvent()
	ev.Sequence = 1
	ev.Hash = eventstore.ComputeHash(&ev)
	good := string(exportLines(t, ev))
	notJSON := ev
	notJSON.Sequence, notJSON.Payload = 2, json.RawMessage(`{"cents":200`)
	notJSON.Hash = eventstore.ComputeHash(&notJSON)
	line := strings.NewReplacer(`"sequence":1,`, `"sequence":2,`, `{"cents":200}}`, `{"cents":200}`, ev.Hash.String(), notJSON.Hash.String()).Replace(good)
	file := []byte(good + line + good)

	got, hashes, err := readHashed(file, 0)
	if err != nil || len(got) != 3 || string(got[1].Payload) != string(notJSON.Payload) || hashes[1] != notJSON.Hash {
		t.Fatalf("a payload that is not JSON under its own hash: %d events, %v", len(got), err)
	}
	want := eventstore.ReadExport(bytes.NewReader(file), func(eventstore.RecordedEvent) error { return nil })
	if want == nil || !strings.Contains(want.Error(), "export line 2: not a JSON object") {
		t.Fatalf("ReadExport of a payload that is not JSON: %v", want)
	}
	tampered := []byte(good + strings.Replace(line, notJSON.Hash.String(), ev.Hash.String(), 1) + good)
	got, _, err = readHashed(tampered, 0)
	if err == nil || err.Error() != want.Error() || len(got) != 1 {
		t.Fatalf("a payload that is not JSON under another hash: %v after %d events, want ReadExport's %v", err, len(got), want)
	}
}
