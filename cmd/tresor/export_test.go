package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// simulateStream writes plays through the real write path into a fresh
// embedded data directory and returns it.
func simulateStream(tb testing.TB, plays string) string {
	tb.Helper()
	data := filepath.Join(tb.TempDir(), "data")
	if _, stderr, code := run(tb, "simulate", "--data", data, "--plays", plays, "--players", "20", "--quiet"); code != 0 {
		tb.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	return data
}

// exportFile runs tresor export with args and returns the summary line.
func exportFile(tb testing.TB, args ...string) string {
	tb.Helper()
	_, stderr, code := run(tb, append([]string{"export"}, args...)...)
	if code != 0 {
		tb.Fatalf("export %v: exit %d: %s", args, code, stderr)
	}
	return stderr
}

// verifyExport reads an export back and checks every hash and seal with
// the operator's public seal key; it returns the records.
func verifyExport(tb testing.TB, file []byte, pub ed25519.PublicKey) []eventstore.RecordedEvent {
	tb.Helper()
	v := eventstore.NewVerifier(pub)
	var recs []eventstore.RecordedEvent
	if err := eventstore.ReadExport(bytes.NewReader(file), func(r eventstore.RecordedEvent) error {
		recs = append(recs, r)
		return v.Check(r)
	}); err != nil {
		tb.Fatal(err)
	}
	if st := v.Stats(); st.Seals == 0 || st.Events != uint64(len(recs)) || len(recs) == 0 {
		tb.Fatalf("verified %+v over %d records: want them all and a seal", st, len(recs))
	}
	for i, r := range recs {
		if r.Sequence != uint64(i+1) {
			tb.Fatalf("record %d has sequence %d", i, r.Sequence)
		}
	}
	return recs
}

// sealPublicKey reads the public half of a seal key file (an Ed25519 seed).
func sealPublicKey(tb testing.TB, path string) ed25519.PublicKey {
	tb.Helper()
	return ed25519.NewKeyFromSeed(mustRead(tb, path)).Public().(ed25519.PublicKey)
}

// TestExportResumesByteForByte exports a simulated stream in one go, then
// in pieces (a range and --resume; --from to stdout; a file cut in the
// middle of a line and resumed) and checks that every way gives the same
// file, which verifies with the operator's seal key.
func TestExportResumesByteForByte(t *testing.T) {
	t.Parallel()
	data := simulateStream(t, "200")
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.ndjson")
	summary := exportFile(t, "--data", data, "--out", whole)
	want := mustRead(t, whole)
	recs := verifyExport(t, want, sealPublicKey(t, filepath.Join(data, "keys", "seal.ed25519")))
	last := recs[len(recs)-1].Sequence
	if m := regexp.MustCompile(`^exported (\d+) events from sequence 1 to last sequence (\d+) in \S+, \d+ events/s\n$`).FindStringSubmatch(summary); m == nil ||
		m[1] != fmtUint(last) || m[2] != fmtUint(last) {
		t.Fatalf("summary %q, want %d events", summary, last)
	}

	mid := last / 2
	pieces := filepath.Join(dir, "pieces.ndjson")
	if s := exportFile(t, "--data", data, "--out", pieces, "--to", fmtUint(mid), "--progress"); !strings.HasPrefix(s, "export: 1 / "+fmtUint(mid)+" events") {
		t.Fatalf("--progress: %q", s)
	}
	if s := exportFile(t, "--data", data, "--out", pieces, "--resume"); !strings.Contains(s, "from sequence "+fmtUint(mid+1)+" ") {
		t.Fatalf("resume summary %q", s)
	}
	if s := exportFile(t, "--data", data, "--out", pieces, "--resume"); !strings.HasPrefix(s, "exported 0 events") {
		t.Fatalf("resume of a complete export: %q", s)
	}
	head, _, _ := run(t, "export", "--data", data, "--out", "-", "--to", fmtUint(mid))
	tail, _, _ := run(t, "export", "--data", data, "--out", "-", "--from", fmtUint(mid+1))
	cut := filepath.Join(dir, "cut.ndjson")
	if err := os.WriteFile(cut, want[:len(want)/2+7], 0o644); err != nil { // mid-line, as a killed export leaves it
		t.Fatal(err)
	}
	exportFile(t, "--data", data, "--out", cut, "--resume")
	for name, got := range map[string][]byte{"range then --resume": mustRead(t, pieces), "--to then --from on stdout": []byte(head + tail),
		"cut mid-line then --resume": mustRead(t, cut)} {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the one-shot export's %d", name, len(got), len(want))
		}
	}
}

func fmtUint(v uint64) string { return strconv.FormatUint(v, 10) }

// TestExportRefusesBadInput checks that bad flags are one line and exit
// status 2, that an empty data directory is an error that creates no
// stream, and that --resume refuses a file exported from another stream.
func TestExportRefusesBadInput(t *testing.T) {
	t.Parallel()
	data, other := simulateStream(t, "20"), simulateStream(t, "20")
	dir := t.TempDir()
	exported := filepath.Join(dir, "exported.ndjson")
	exportFile(t, "--data", data, "--out", exported)
	for _, args := range [][]string{
		{"--data", data},
		{"--data", data, "--out", "-", "--from", "0"},
		{"--data", data, "--out", "-", "--from", "5", "--to", "4"},
		{"--data", data, "--out", "-", "--resume"},
		{"--data", data, "--out", exported, "--resume", "--from", "3"},
		{"--data", data, "--out", "-", "--to", "1000000"},
		{"--data", data, "--out", exported},
		{"--data", data, "--out", "-", "--from", "x"},
		{"--data", data, "--out", "-", "--no-such-flag"},
	} {
		stdout, stderr, code := run(t, append([]string{"export"}, args...)...)
		if code != 2 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.HasPrefix(stderr, "tresor: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	empty := filepath.Join(dir, "empty")
	_, stderr, code := run(t, "export", "--data", empty, "--out", "-")
	if _, err := os.Stat(filepath.Join(empty, "jetstream")); code != 1 || !strings.Contains(stderr, "no Tresor stream in data directory") || !os.IsNotExist(err) {
		t.Errorf("empty data directory: exit %d, %q; jetstream dir: %v", code, stderr, err)
	}
	_, stderr, code = run(t, "export", "--data", other, "--out", exported, "--resume")
	if code != 1 || !strings.Contains(stderr, "not an export of this stream") {
		t.Errorf("resume from another stream: exit %d, %q", code, stderr)
	}
}

// regulatorConf is the nats-server authorization block of docs/export.md,
// taken from the page so that what is documented is what is tested.
func regulatorConf(tb testing.TB) string {
	tb.Helper()
	doc := string(mustRead(tb, "../../docs/export.md"))
	_, rest, ok := strings.Cut(doc, "```conf\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		tb.Fatal("docs/export.md has no ```conf block")
	}
	return block
}

// runAuthServer starts an in-process nats-server with JetStream, a random
// port and conf's authorization, and returns its host:port.
func runAuthServer(tb testing.TB, conf string) string {
	tb.Helper()
	return startAuthServer(tb, conf).Addr().String()
}

// startAuthServer is runAuthServer, returning the server, for a test that
// stops it.
func startAuthServer(tb testing.TB, conf string) *natsserver.Server {
	tb.Helper()
	dir := tb.TempDir()
	file := filepath.Join(dir, "nats.conf")
	conf = fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "js"), conf)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	opts, err := natsserver.ProcessConfigFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready")
	}
	return srv
}

// writeKey writes size random bytes to a key file.
func writeKey(tb testing.TB, size int) string {
	tb.Helper()
	b := make([]byte, size)
	rand.Read(b)
	f := filepath.Join(tb.TempDir(), "key")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestRegulatorConfIsTheReaderAccess keeps the configuration block of
// docs/export.md equal to the access the code defines (and gives the
// embedded server's reader): one definition, shown on the page.
func TestRegulatorConfIsTheReaderAccess(t *testing.T) {
	t.Parallel()
	want := eventstore.RegulatorConf(eventstore.ReaderAccess{InboxPrefix: "_INBOX_regulator"})
	if got := regulatorConf(t); got != want {
		t.Fatalf("docs/export.md's ```conf block differs from eventstore.RegulatorConf; put this in the page:\n%s", want)
	}
}

// TestRegulatorUserReadsButCannotWrite runs a nats-server with the
// regulator user of docs/export.md, writes a stream through the real write
// path as the operator, exports it as the regulator (the file verifies and
// equals the operator's own export), then has the regulator try every
// forbidden operation, each refused with a permissions violation naming
// its subject, and every way of having the server copy the stream out of
// reach, each confined; the stream is unchanged.
func TestRegulatorUserReadsButCannotWrite(t *testing.T) {
	operator, regulator, sealKey := regulatorStream(t)
	dir := t.TempDir()
	byRegulator, byOperator := filepath.Join(dir, "regulator.ndjson"), filepath.Join(dir, "operator.ndjson")
	exportFile(t, "--nats", regulator, "--inbox-prefix", "_INBOX_regulator", "--out", byRegulator)
	file := mustRead(t, byRegulator)
	recs := verifyExport(t, file, sealPublicKey(t, sealKey))

	connect := func(opts ...nats.Option) *nats.Conn {
		nc, err := nats.Connect(regulator, append(opts, nats.CustomInboxPrefix("_INBOX_regulator"))...)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	eventstoretest.RequireWritesRefused(t, connect, "TRESOR", "tresor."+recs[0].Chain+"."+recs[0].Aggregate.String())
	reader := connect()
	defer reader.Close()
	owner, err := nats.Connect(operator)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	eventstoretest.RequireCopiesConfined(t, reader, owner, "TRESOR", "_INBOX_regulator")
	// Nothing changed: the operator's own export is the same file.
	exportFile(t, "--nats", operator, "--out", byOperator)
	if !bytes.Equal(mustRead(t, byOperator), file) {
		t.Fatal("the operator's export differs from the regulator's: the stream changed")
	}
}
