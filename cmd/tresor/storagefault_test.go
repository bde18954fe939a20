package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
)

// The storage faults of the crash suite: serve is killed with SIGKILL under
// the crash suite's load, the data directory is copied as an operator's
// stop-and-copy backup, then the stream's newest block file is damaged as
// a failing disk would. A serve on the damaged directory must never become
// ready on a stream short of what was acknowledged, the audit must name
// the truncation, and the documented recovery (restore the backup) must
// bring back every acknowledged write with the answer its client saw.
//
// The default run damages a few faults picked by the run's seed
// (TRESOR_CRASH_SEED replays it); TRESOR_STORAGE_FAULTS=all runs every
// fault (make crash-storage).
const (
	storageFaultClients = 8
	// The clients write until storageFaultAcksMin answers are
	// acknowledged, then on for up to storageFaultLoadMax, a random
	// moment, before the kill.
	storageFaultAcksMin = 400
	storageFaultLoadMax = 3 * time.Second
	storageFaultsPicked = 3
	// storageFaultServeWait bounds how long a serve on a damaged directory
	// may take to exit or become ready.
	storageFaultServeWait = 90 * time.Second
)

// storageFault is one way a disk damages the tail of a block file: damage
// returns the file's new content.
type storageFault struct {
	name   string
	damage func(b []byte) []byte
}

var storageFaults = []storageFault{
	{"cut_7B", cutTail(7)},
	{"cut_4KiB", cutTail(4 << 10)},
	{"cut_1MiB", cutTail(1 << 20)},
	{"zero_last_4KiB", zeroTail(4 << 10)},
	{"flip_near_tail", flipAt(func(n int) int { return n - 16 })},
	{"flip_mid_file", flipAt(func(n int) int { return n / 2 })},
	{"flip_early", flipAt(func(n int) int { return min(n-1, 100) })},
}

// cutTail cuts n bytes off the end, or half the file when it is not
// larger than n.
func cutTail(n int) func([]byte) []byte {
	return func(b []byte) []byte {
		if n >= len(b) {
			return b[:len(b)/2]
		}
		return b[:len(b)-n]
	}
}

// zeroTail zeroes the last n bytes (all of a smaller file), as a write
// that reached the disk's metadata but not its data.
func zeroTail(n int) func([]byte) []byte {
	return func(b []byte) []byte {
		clear(b[max(0, len(b)-n):])
		return b
	}
}

// flipAt inverts the byte at at(len(b)).
func flipAt(at func(n int) int) func([]byte) []byte {
	return func(b []byte) []byte {
		b[at(len(b))] ^= 0xff
		return b
	}
}

// TestStorageFaultsAreCaughtNeverAdopted is the storage-fault suite; see
// above.
func TestStorageFaultsAreCaughtNeverAdopted(t *testing.T) {
	t.Parallel()
	r := newCrashRun(t)
	r.clients = storageFaultClients
	faults := pickStorageFaults(t, r.seed)
	t.Logf("storage faults: %d of %d, seed %d (TRESOR_CRASH_SEED replays the pick, TRESOR_STORAGE_FAULTS=all runs them all)",
		len(faults), len(storageFaults), r.seed)
	start := time.Now()
	r.loadThenKill()
	backup := filepath.Join(t.TempDir(), "backup")
	copyDir(t, r.data, backup)
	parent := r.t
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			r.t = t
			defer func() { r.t = parent }()
			r.storageFault(f, backup)
		})
	}
	t.Logf("storage faults: %d checked in %s", len(faults), time.Since(start).Round(time.Second))
}

// pickStorageFaults returns every fault when TRESOR_STORAGE_FAULTS is
// "all", else storageFaultsPicked of them picked by seed.
func pickStorageFaults(t *testing.T, seed uint64) []storageFault {
	switch v := os.Getenv("TRESOR_STORAGE_FAULTS"); v {
	case "all":
		return storageFaults
	case "":
	default:
		t.Fatalf("TRESOR_STORAGE_FAULTS %q: want all or nothing", v)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []storageFault
	for _, i := range rng.Perm(len(storageFaults))[:storageFaultsPicked] {
		out = append(out, storageFaults[i])
	}
	return out
}

// loadThenKill runs the clients on serve until storageFaultAcksMin
// answers are acknowledged and on for a random while, then kills serve with
// SIGKILL and ends the clients' requests: every answer they hold was given
// before the kill.
func (r *crashRun) loadThenKill() {
	r.t.Helper()
	s := startServe(r.t, r.data, r.serveArgs...)
	r.setUp(s)
	eventually(r.t, 2*time.Minute, func() bool { return r.journal.acknowledged() >= storageFaultAcksMin })
	select {
	case <-time.After(r.between(0, storageFaultLoadMax)):
	case err := <-s.done:
		r.t.Fatalf("tresor serve exited by itself: %v\n%s", err, s.logs)
	}
	r.kill(s)
	r.cancel()
	r.wg.Wait()
	r.t.Logf("killed under load after %d acknowledged answers", r.journal.acknowledged())
}

// acknowledged counts the answers 2xx so far.
func (j *crashJournal) acknowledged() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, a := range j.answers {
		if a.status/100 == 2 {
			n++
		}
	}
	return n
}

// storageFault damages the data directory restored from backup with f,
// checks that neither serve nor the audit adopts a stream that lost
// acknowledged writes, then restores the backup and checks every
// acknowledged write is back.
func (r *crashRun) storageFault(f storageFault, backup string) {
	t := r.t
	copyDir(t, backup, r.data)
	blk := newestBlock(t, r.data)
	b := mustRead(t, blk)
	damaged := f.damage(slices.Clone(b))
	if err := os.WriteFile(blk, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	mark, ok, err := eventstore.ReadHighWaterFile(filepath.Join(r.data, highWaterFile))
	if err != nil || !ok {
		t.Fatalf("high-water mark: %v (found %t)", err, ok)
	}
	// The export and the audit read copies, so that serve meets the damage
	// as the disk left it, before any nats-server mended the directory.
	end, lost := r.damagedStream(dataCopy(t, r.data))
	auditDir := dataCopy(t, r.data)
	short := end < mark.Sequence
	t.Logf("%s: block %s of %d bytes now %d; the stream ends at %d, the high-water mark names %d; %d acknowledged answers lost",
		f.name, filepath.Base(blk), len(b), len(damaged), end, mark.Sequence, lost)
	if lost > 0 && !short {
		t.Errorf("%d acknowledged answers lost, yet the stream reaches the high-water mark %d", lost, mark.Sequence)
	}
	s, ready, exit := tryServe(t, r.data, r.serveArgs...)
	switch {
	case ready && short:
		t.Errorf("serve became ready on a stream ending at %d, short of the high-water mark %d\n%s", end, mark.Sequence, s.logs)
		s.kill()
	case ready:
		// Nothing acknowledged was lost: serve may start, and must then
		// hold every acknowledged write.
		s.stop()
		r.checkFresh(f.name + ": serve started on the damaged stream")
	case short:
		if exit == nil || !strings.Contains(s.logs.String(), "short of what was acknowledged") {
			t.Errorf("serve exited with %v, want a failure naming the evidence\n%s", exit, s.logs)
		}
	default:
		t.Logf("serve refused the damaged stream, which reaches the high-water mark: %v\n%s", exit, s.logs)
	}
	r.auditDamaged(auditDir, short)
	copyDir(t, backup, r.data)
	startServe(t, r.data, r.serveArgs...).stop()
	r.checkFresh(f.name + ": restored from the backup")
}

// damagedStream exports the stream of data and returns the sequence it
// ends at and how many acknowledged answers it lacks.
func (r *crashRun) damagedStream(data string) (end uint64, lost int) {
	t := r.t
	t.Helper()
	out := filepath.Join(t.TempDir(), "damaged.ndjson")
	if _, stderr, code := run(t, "export", "--data", data, "--out", out); code != 0 {
		t.Fatalf("export of the damaged stream: exit %d: %s", code, stderr)
	}
	x := newCrashStream()
	if err := x.readExport(out); err != nil {
		t.Fatalf("export of the damaged stream: %v", err)
	}
	for _, a := range r.journal.snapshot().answers {
		if a.status/100 == 2 && a.w.kind != kindLimits {
			if verdict, _ := x.verify(a); verdict == verdictLost {
				lost++
			}
		}
	}
	return x.last, lost
}

// auditDamaged audits the damaged copy data: it must fail naming
// stream_truncated when the stream is short of the high-water mark.
func (r *crashRun) auditDamaged(data string, short bool) {
	t := r.t
	t.Helper()
	stdout, stderr, code := run(t, "audit", "--json", "--quiet", "--data", data)
	var rep auditJSON
	json.Unmarshal([]byte(stdout), &rep)
	t.Logf("audit of the damaged stream: exit %d, violations %v", code, rep.ViolationCounts)
	if short && (code == 0 || rep.ViolationCounts["stream_truncated"] == 0) {
		t.Errorf("audit of a stream short of the high-water mark: exit %d, violations %v, want stream_truncated\n%.2000s%s",
			code, rep.ViolationCounts, stdout, stderr)
	}
}

// checkFresh is check on a data directory that may hold another stream
// than the one checked before: the export is read from its start.
func (r *crashRun) checkFresh(label string) {
	r.t.Helper()
	r.export = filepath.Join(r.t.TempDir(), "stream.ndjson")
	r.stream = newCrashStream()
	r.lost, r.reported = map[int]bool{}, map[string]bool{}
	r.check(label, false)
}

// tryServe starts serve on data and watches it until it exits or becomes
// ready, polling /v1/ready all the while: a serve that must refuse the
// stream never answers it 200. exit is the error it exited with.
func tryServe(tb testing.TB, data string, args ...string) (s *server, ready bool, exit error) {
	tb.Helper()
	s, addr := launchServe(tb, data, args...)
	deadline := time.Now().Add(storageFaultServeWait)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			return s, false, err
		case a := <-addr:
			s.url = "http://" + a
		case <-time.After(10 * time.Millisecond):
		}
		if s.url != "" && isReady(s.url) {
			return s, true, nil
		}
	}
	tb.Fatalf("tresor serve neither ready nor gone after %s\n%s", storageFaultServeWait, s.logs)
	return nil, false, nil
}

// isReady reports whether GET /v1/ready answers 200.
func isReady(url string) bool {
	resp, err := contractClient.Get(url + "/v1/ready")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// dataCopy copies the data directory into a temporary one and returns it.
func dataCopy(tb testing.TB, data string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), "data")
	copyDir(tb, data, dst)
	return dst
}

// copyDir replaces dst with a copy of src, as an operator copies a
// stopped data directory.
func copyDir(tb testing.TB, src, dst string) {
	tb.Helper()
	if err := os.RemoveAll(dst); err != nil {
		tb.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		tb.Fatalf("copy %s to %s: %v", src, dst, err)
	}
	// CopyFS makes files readable by all; the data directory's are not.
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chmod(p, 0o600)
		}
		return nil
	})
}
