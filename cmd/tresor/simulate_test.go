package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// TestSimulateReportsBatchesAndProfilesThePlays runs a short simulation
// with both profiles and checks the committer's figures against the plays'.
func TestSimulateReportsBatchesAndProfilesThePlays(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	var r struct {
		Events         int     `json:"events"`
		Batches        uint64  `json:"batches"`
		EventsPerBatch float64 `json:"events_per_batch"`
		CommitMsAvg    float64 `json:"commit_ms_avg"`
		CPU            float64 `json:"cpu_us_per_event"`
	}
	simulateJSON(t, &r, "--data", filepath.Join(dir, "data"), "--price", "1", "--plays", "200", "--players", "10",
		"--cpuprofile", cpu, "--memprofile", mem)
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

// TestSimulateSplitsACommandsTime runs a short simulation and checks that
// the report splits the commands' latency by where it went: each part is
// there, none is above the command's own p99, and the commit, which every
// command waits for, is not zero.
func TestSimulateSplitsACommandsTime(t *testing.T) {
	t.Parallel()
	var r struct {
		P50       float64 `json:"command_latency_p50_ms"`
		P99       float64 `json:"command_latency_p99_ms"`
		QueuedP50 float64 `json:"command_queued_p50_ms"`
		QueuedP99 float64 `json:"command_queued_p99_ms"`
		HeldP50   float64 `json:"command_in_batch_p50_ms"`
		HeldP99   float64 `json:"command_in_batch_p99_ms"`
		CommitP50 float64 `json:"command_commit_p50_ms"`
		CommitP99 float64 `json:"command_commit_p99_ms"`
		OutP50    float64 `json:"command_outside_log_p50_ms"`
		OutP99    float64 `json:"command_outside_log_p99_ms"`
	}
	simulateJSON(t, &r, "--data", filepath.Join(t.TempDir(), "data"), "--price", "1", "--plays", "200", "--players", "10")
	parts := []float64{r.QueuedP50, r.QueuedP99, r.HeldP50, r.HeldP99, r.CommitP50, r.CommitP99, r.OutP50, r.OutP99}
	for _, v := range parts {
		if v < 0 || v > r.P99 {
			t.Fatalf("a part outside [0, the command's p99]: %+v", r)
		}
	}
	if r.CommitP50 <= 0 || r.CommitP99 < r.CommitP50 || r.OutP50 <= 0 || r.CommitP50 > r.P50 {
		t.Fatalf("report: %+v", r)
	}
}

// TestSimulateSplitsTheLatencyBySnapshot takes a writer snapshot every 100
// events during an open-loop run and checks that the report classes some
// commands, not all, as clicked while one was taken, with their figures,
// and gives the processors the process used in each phase: some, and no
// more than the machine has.
func TestSimulateSplitsTheLatencyBySnapshot(t *testing.T) {
	t.Parallel()
	const plays = 300
	var r struct {
		Snapshots   int     `json:"snapshots_taken"`
		During      int     `json:"commands_during_snapshots"`
		DuringP99   float64 `json:"command_latency_p99_ms_during_snapshots"`
		OutsideP99  float64 `json:"command_latency_p99_ms_outside_snapshots"`
		EncodeP50   float64 `json:"command_latency_p50_ms_while_encoding"`
		StoreP50    float64 `json:"command_latency_p50_ms_while_storing"`
		CPUEncoding float64 `json:"cpu_cores_while_encoding"`
		CPUStoring  float64 `json:"cpu_cores_while_storing"`
		CPUOutside  float64 `json:"cpu_cores_outside_snapshots"`
		CommandP99  float64 `json:"command_latency_p99_ms"`
		RawP50      float64 `json:"yardstick_command_latency_p50_ms"`
		RawP99      float64 `json:"yardstick_command_latency_p99_ms"`
		RawRatio    float64 `json:"command_latency_p99_over_yardstick"`
		RawPuts     int     `json:"yardstick_puts"`
		RawPutBytes int     `json:"yardstick_put_bytes"`
		RawDuring   float64 `json:"yardstick_command_latency_p99_ms_during_puts"`
		RawOutside  float64 `json:"yardstick_command_latency_p99_ms_outside_puts"`
	}
	simulateJSON(t, &r, "--data", filepath.Join(t.TempDir(), "data"), "--price", "1", "--plays", strconv.Itoa(plays),
		"--players", "10", "--rate", "200", "--snapshot-every", "100", "--yardstick")
	if r.Snapshots < 2 || r.During < 1 || r.During >= 5*plays || r.DuringP99 <= 0 || r.OutsideP99 <= 0 ||
		r.EncodeP50+r.StoreP50 <= 0 {
		t.Fatalf("report: %+v", r)
	}
	// Rounded to hundredths: a phase of a few milliseconds can read 0.
	most := float64(runtime.NumCPU()) * 1.05
	for _, c := range []float64{r.CPUEncoding, r.CPUStoring, r.CPUOutside} {
		if c < 0 || c > most {
			t.Fatalf("processors in use outside [0, %.2f]: %+v", most, r)
		}
	}
	if r.CPUEncoding+r.CPUStoring <= 0 || r.CPUOutside <= 0 {
		t.Fatalf("no processor time measured: %+v", r)
	}
	// The latency yardstick (--yardstick with --rate): a raw writer's
	// commands at the plays' rate for 5 s (the plays' 1.5 s, raised to the
	// least), with stores of the snapshots' size as often as the writer
	// took them (every 100 events: a dozen a second).
	if r.RawP50 <= 0 || r.RawP99 < r.RawP50 || r.RawRatio != r.CommandP99/r.RawP99 ||
		r.RawPuts < 1 || r.RawPutBytes <= 0 || r.RawDuring <= 0 || r.RawOutside <= 0 {
		t.Fatalf("latency yardstick: %+v", r)
	}
}

// simulateJSON runs simulate quietly with args and reads its JSON report
// into report.
func simulateJSON(t *testing.T, report any, args ...string) {
	t.Helper()
	stdout, stderr, code := run(t, append([]string{"simulate", "--quiet", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), report); err != nil {
		t.Fatalf("report %q: %v", stdout, err)
	}
}

// TestSimulateMeasuresTheYardstickBeforeAndAfter checks the yardstick's
// rounds: as many before the plays as after, the first after them being
// the yardstick reported as always, each side's median among its rounds,
// and Tresor's rate over each.
func TestSimulateMeasuresTheYardstickBeforeAndAfter(t *testing.T) {
	t.Parallel()
	var r struct {
		EventsPerSecond float64 `json:"events_per_second"`
		Yardstick       float64 `json:"yardstick_events_per_second"`
		Ratio           float64 `json:"events_per_second_over_yardstick"`
		Before          float64 `json:"yardstick_before_events_per_second"`
		BeforeRatio     float64 `json:"events_per_second_over_yardstick_before"`
		After           float64 `json:"yardstick_after_events_per_second"`
		AfterRatio      float64 `json:"events_per_second_over_yardstick_after"`
		Rounds          struct {
			Before []float64 `json:"before"`
			After  []float64 `json:"after"`
		} `json:"yardstick_rounds_events_per_second"`
		RawP99 *float64 `json:"yardstick_command_latency_p99_ms"`
	}
	simulateJSON(t, &r, "--data", filepath.Join(t.TempDir(), "data"), "--price", "1", "--plays", "100", "--players", "10", "--yardstick")
	// Without --rate there is no load to repeat: no latency yardstick.
	if len(r.Rounds.Before) != 3 || len(r.Rounds.After) != 3 || r.Rounds.After[0] != r.Yardstick || r.Ratio <= 0 || r.RawP99 != nil {
		t.Fatalf("report: %+v", r)
	}
	for _, side := range []struct {
		name          string
		rounds        []float64
		median, ratio float64
	}{{"before", r.Rounds.Before, r.Before, r.BeforeRatio}, {"after", r.Rounds.After, r.After, r.AfterRatio}} {
		below, above := 0, 0
		for _, x := range side.rounds {
			if x <= side.median {
				below++
			}
			if x >= side.median {
				above++
			}
		}
		if side.median <= 0 || below < 2 || above < 2 || side.ratio != r.EventsPerSecond/side.median {
			t.Fatalf("%s: median %v of %v, ratio %v (events/s %v)", side.name, side.median, side.rounds, side.ratio, r.EventsPerSecond)
		}
	}
}
