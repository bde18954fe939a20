package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tresorBin is the real binary, built once for the package's tests: they
// run it as a user would and read its output and exit status. A test that
// starts its processes on random ports in directories of its own runs in
// parallel (t.Parallel); one that stops, freezes or times a cluster,
// bounds a deadline or sets the environment does not, and so runs alone,
// before the parallel ones.
var tresorBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tresor-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tresorBin = filepath.Join(dir, "tresor")
	if out, err := exec.Command("go", "build", "-o", tresorBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tresor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary and returns stdout, stderr and the exit status.
func run(tb testing.TB, args ...string) (string, string, int) {
	tb.Helper()
	return runWithin(tb, 0, args...)
}

// runWithin is run, the binary killed after d (0: never): for a command
// that must exit at once and, were the test to fail, would serve for ever.
func runWithin(tb testing.TB, d time.Duration, args ...string) (string, string, int) {
	tb.Helper()
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, tresorBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	tb.Fatalf("run tresor %v: %v", args, err)
	return "", "", -1
}

const vectorSeed = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func TestDeckCommandWritesTheArticle3Multiset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		price, total string
	}{{"0.50", "157500.00"}, {"1", "315000.00"}, {"2.00", "630000.00"}} {
		t.Run(tc.price, func(t *testing.T) {
			stdout, stderr, code := run(t, "deck", "--price", tc.price, "--seed", vectorSeed, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rows[0], ","); got != "unit,tier,prize" || len(rows) != 450001 {
				t.Fatalf("header %q, %d rows", got, len(rows))
			}
			counts := map[string]int{}
			var cents int64
			for i, r := range rows[1:] {
				if r[0] != fmt.Sprint(i) {
					t.Fatalf("row %d numbers unit %s", i, r[0])
				}
				counts[r[1]]++
				var e, c int64
				fmt.Sscanf(r[2], "%d.%d", &e, &c)
				cents += e*100 + c
			}
			want := map[string]int{"chandelier_x3": 1, "monkey_x3": 3, "sapphire_x3": 100, "skull_x3": 1000, "chandelier_x2": 500,
				"monkey_x2": 2000, "sapphire_x2": 26000, "skull_x2": 38000, "chandelier_x1": 52000, "none": 330396}
			for k, v := range want {
				if counts[k] != v {
					t.Errorf("tier %s: %d units, want %d", k, counts[k], v)
				}
			}
			if got := fmt.Sprintf("%d.%02d", cents/100, cents%100); got != tc.total {
				t.Errorf("deck pays %s, want %s", got, tc.total)
			}
			var c struct {
				Commitment struct {
					SeedHash string `json:"seed_hash"`
					Root     string `json:"root"`
					Units    int    `json:"units"`
				} `json:"commitment"`
			}
			if err := json.Unmarshal([]byte(stderr), &c); err != nil || len(c.Commitment.Root) != 64 || c.Commitment.Units != 450000 {
				t.Fatalf("commitment %q: %v", stderr, err)
			}
		})
	}
}

func TestBadInputExitsWithStatus2AndOneLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"deck", "--price", "1", "--seed", "abc"},
		{"deck", "--price", "1", "--seed", strings.Repeat("zz", 32)},
		{"deck", "--price", "0.499", "--seed", vectorSeed},
		{"deck", "--price", "3", "--seed", vectorSeed},
		{"deck", "--price", "-1", "--seed", vectorSeed},
		{"rules", "--no-such-flag"},
		{"simulate", "--pipeline-depth", "17"},
		{"simulate", "--replicas", "3", "--pipeline-depth", "2"},
		{"simulate", "--replicas", "3"}, // embedded: one node
		{"serve", "--replicas", "3", "--data", filepath.Join(t.TempDir(), "none")},
		{"simulate", "--batch-events", "3001"},
		{"simulate", "--batch-events", "1"},
	} {
		stdout, stderr, code := run(t, args...)
		if code != 2 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.HasPrefix(stderr, "tresor: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

func TestRulesCommand(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := run(t, "rules", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r struct {
		Version string `json:"version"`
		Tables  []struct {
			Price      string `json:"price"`
			Total      string `json:"total"`
			PayoutRate string `json:"payout_rate"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(r.Tables)
	if r.Version != "2015-07-13" || got != "[{0.50 157500.00 0.7} {1.00 315000.00 0.7} {2.00 630000.00 0.7}]" {
		t.Fatalf("rules: %s %s", r.Version, got)
	}
	// A rule set whose row does not add up is refused, naming the row.
	broken := strings.Replace(string(mustRead(t, "../../domain/rulesets/ile-au-tresor-2015-07-13.json")), `"count": 26000, "amount": "3", "total": "78000"`, `"count": 26000, "amount": "3", "total": "78003"`, 1)
	file := filepath.Join(t.TempDir(), "broken.json")
	os.WriteFile(file, []byte(broken), 0o600)
	_, stderr, code = run(t, "rules", "--file", file)
	if code == 0 || !strings.Contains(stderr, "Article 3.2 row sapphire_x2") || !strings.Contains(stderr, "78003.00") {
		t.Fatalf("broken rules: exit %d, %s", code, stderr)
	}
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
