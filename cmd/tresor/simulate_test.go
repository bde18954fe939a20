package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSimulateReportsBatchesAndProfilesThePlays runs a short simulation
// with both profiles and checks the committer's figures against the plays'.
func TestSimulateReportsBatchesAndProfilesThePlays(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	stdout, stderr, code := run(t, "simulate", "--data", filepath.Join(dir, "data"), "--price", "1", "--plays", "200", "--players", "10",
		"--quiet", "--json", "--cpuprofile", cpu, "--memprofile", mem)
	if code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	var r struct {
		Events         int     `json:"events"`
		Batches        uint64  `json:"batches"`
		EventsPerBatch float64 `json:"events_per_batch"`
		CommitMsAvg    float64 `json:"commit_ms_avg"`
		CPU            float64 `json:"cpu_us_per_event"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("report %q: %v", stdout, err)
	}
	// The batches hold every event of the plays, and at most the seals
	// and the writer's own commands besides; at most one batch per
	// command (a stake and four throws per play).
	inBatches := r.EventsPerBatch * float64(r.Batches)
	if r.Batches == 0 || r.Batches > 5*200+10 || inBatches < float64(r.Events) || inBatches > float64(r.Events)+50 ||
		r.CommitMsAvg <= 0 || r.CPU <= 0 {
		t.Fatalf("report: %+v", r)
	}
	for _, p := range []string{cpu, mem} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // pprof's gzipped protobuf
			t.Fatalf("%s: %d bytes, not a profile", p, len(b))
		}
	}
}
