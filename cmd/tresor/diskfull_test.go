package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a fresh ext4 file system of sizeMiB on a loop device
// under a temporary directory and returns its mount point. It skips the
// test, loudly, where it cannot mount (not root, no loop device).
func smallDisk(t *testing.T, sizeMiB int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: a full disk needs a loop-mounted file system, and mount needs root")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(int64(sizeMiB) << 20)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks kept for root, who would otherwise write past "full".
	if out, err := exec.Command("mkfs.ext4", "-q", "-m", "0", img).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: mkfs.ext4: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: mount -o loop: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// fill writes a file under dir until the disk refuses: in large chunks,
// then in blocks, so that nothing is left for a write.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10} {
		chunk := make([]byte, size)
		for n := 0; n < 1<<16; n++ {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	f.Sync()
	return path
}

// depositLoop deposits 1.00 again and again, each with its own key, and
// counts the acknowledged ones and the connections refused.
type depositLoop struct {
	s               *server
	op              string
	stop            chan struct{}
	done            sync.WaitGroup
	sent, acked     atomic.Int64
	refused, other  atomic.Int64
	mu              sync.Mutex
	ackedKeys       []string
	firstErr        error
	unavailableNoRA atomic.Int64
	// lastAcked is when the last acknowledgement came (Unix nanoseconds):
	// the first write the disk refuses comes after it.
	lastAcked atomic.Int64
}

func (d *depositLoop) run() {
	defer d.done.Done()
	for i := 0; ; i++ {
		select {
		case <-d.stop:
			return
		default:
		}
		key := fmt.Sprintf("full-%d", i)
		d.sent.Add(1)
		p, err := d.deposit(key)
		switch {
		case err != nil:
			d.refused.Add(1)
			d.mu.Lock()
			if d.firstErr == nil {
				d.firstErr = err
			}
			d.mu.Unlock()
			time.Sleep(5 * time.Millisecond) // pace the loop, not a wait
		case p.status == 200:
			d.acked.Add(1)
			d.lastAcked.Store(time.Now().UnixNano())
			d.mu.Lock()
			d.ackedKeys = append(d.ackedKeys, key)
			d.mu.Unlock()
		case p.status == 503 && p.retryAfter == "":
			d.unavailableNoRA.Add(1)
		default:
			d.other.Add(1)
		}
	}
}

// deposit posts one deposit of 1.00 under key.
func (d *depositLoop) deposit(key string) (probe, error) {
	req, err := http.NewRequest("POST", d.s.url+"/v1/players/p-1/deposits", strings.NewReader(`{"amount":"1.00"}`))
	if err != nil {
		return probe{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+d.op)
	req.Header.Set("Idempotency-Key", key)
	resp, err := contractClient.Do(req)
	if err != nil {
		return probe{}, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return probe{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}, nil
}

// TestDiskFullAnswersUnavailableAndResumes runs serve on a 128 MiB disk
// (its start needs only what the ledger needs), deposits in a loop and
// fills the disk: readiness says unavailable within a second, every
// request answers 503 with Retry-After and none is refused a connection;
// once the filler is removed, serve starts again by itself, every
// acknowledged deposit is in the balance, and a SIGTERM frees the data
// directory within seconds.
func TestDiskFullAnswersUnavailableAndResumes(t *testing.T) {
	mnt := smallDisk(t, 128)
	data := filepath.Join(mnt, "data")
	s := startServe(t, data)
	op := s.token("operator", "")
	s.must(200, call{"PUT", "/v1/players/p-1", op, "", `{"weekly_deposit_limit":"1000000.00","weekly_stake_limit":"10.00"}`})
	d := &depositLoop{s: s, op: op, stop: make(chan struct{})}
	d.done.Add(1)
	go d.run()
	eventually(t, 10*time.Second, func() bool { return d.acked.Load() >= 20 })

	filler := fill(t, mnt)
	filled := time.Now()
	// A block file's last disk block may still take a few deposits after
	// the fill: the first refused write comes after the last one
	// acknowledged, and readiness must flip within a second of it.
	var last probe
	for deadline := time.Now().Add(15 * time.Second); last.body["status"] != "unavailable"; {
		if time.Now().After(deadline) {
			t.Fatalf("readiness still %s 15s after the disk filled (%d deposits acknowledged)\n%s", last.raw, d.acked.Load(), s.logs)
		}
		last, _ = s.probe("/v1/ready", "")
	}
	at := time.Now()
	refusedFrom := filled
	if acked := time.Unix(0, d.lastAcked.Load()); acked.After(refusedFrom) {
		refusedFrom = acked
	}
	flipped := at.Sub(refusedFrom)
	t.Logf("readiness unavailable %s after the disk filled, %s after the last acknowledged deposit",
		at.Sub(filled).Round(time.Millisecond), flipped.Round(time.Millisecond))
	if flipped > time.Second {
		t.Errorf("readiness unavailable %s after the last write the disk took, want within 1s", flipped)
	}
	// Past the writer's stop, serve waits for space, listening.
	eventually(t, 30*time.Second, func() bool {
		p, err := s.probe("/v1/ready", "")
		return err == nil && strings.Contains(fmt.Sprint(p.body["reason"]), "starts again once")
	})
	p, err := s.probe("/v1/players/p-1/account", op)
	if err != nil || p.status != 503 || p.retryAfter == "" {
		t.Fatalf("a read while the disk is full: %+v, %v; want 503 with Retry-After", p, err)
	}
	if !strings.Contains(p.raw, "disk") {
		t.Errorf("the problem while the disk is full does not name the disk: %s", p.raw)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	s.waitReady(30 * time.Second)
	t.Logf("ready %s after the filler was removed", time.Since(removed).Round(time.Millisecond))
	before := d.acked.Load()
	eventually(t, 10*time.Second, func() bool { return d.acked.Load() >= before+20 })
	close(d.stop)
	d.done.Wait()
	if n := d.refused.Load(); n > 0 {
		t.Errorf("%d requests refused a connection, first: %v", n, d.firstErr)
	}
	if n := d.unavailableNoRA.Load(); n > 0 {
		t.Errorf("%d answers 503 without Retry-After", n)
	}
	checkAcknowledged(t, s, d)
	stopWithin(t, s, 5*time.Second)
}

// checkAcknowledged checks that the balance holds every acknowledged
// deposit and no more than were sent, and that each acknowledged key is
// remembered: sent again, it deposits nothing.
func checkAcknowledged(t *testing.T, s *server, d *depositLoop) {
	t.Helper()
	acct := s.must(200, call{"GET", "/v1/players/p-1/account", d.op, "", ""})
	var balance float64 // float-ok: whole units in a test
	fmt.Sscan(fmt.Sprint(acct["balance"]), &balance)
	t.Logf("sent %d deposits, %d acknowledged, %d answered otherwise; balance %v", d.sent.Load(), d.acked.Load(), d.other.Load(), acct["balance"])
	if int64(balance) < d.acked.Load() || int64(balance) > d.sent.Load() {
		t.Fatalf("balance %v: want between the %d acknowledged and the %d sent", acct["balance"], d.acked.Load(), d.sent.Load())
	}
	for _, key := range d.ackedKeys {
		s.must(200, call{"POST", "/v1/players/p-1/deposits", d.op, key, `{"amount":"1.00"}`})
	}
	again := s.must(200, call{"GET", "/v1/players/p-1/account", d.op, "", ""})
	if again["balance"] != acct["balance"] {
		t.Fatalf("the acknowledged keys sent again moved the balance from %v to %v", acct["balance"], again["balance"])
	}
}

// stopWithin sends SIGTERM and checks that the data directory's lock is
// free within d.
func stopWithin(t *testing.T, s *server, d time.Duration) {
	t.Helper()
	lock := filepath.Join(s.data, "jetstream", "tresor.lock")
	s.cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	eventually(t, d, func() bool {
		f, err := os.Open(lock)
		if err != nil {
			return false
		}
		defer f.Close()
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			return false
		}
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return true
	})
	t.Logf("data directory free %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
	if err := <-s.done; err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, s.logs)
	}
}
