package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The alert rules and the dashboard shipped with Tresor.
var (
	alertRules     = filepath.Join("..", "..", "deploy", "prometheus", "tresor-rules.yml")
	alertRuleTests = filepath.Join("..", "..", "deploy", "prometheus", "tresor-rules_test.yml")
	vaultRules     = filepath.Join("..", "..", "deploy", "prometheus", "tresor-vault-rules.yml")
	vaultRuleTests = filepath.Join("..", "..", "deploy", "prometheus", "tresor-vault-rules_test.yml")
	dashboard      = filepath.Join("..", "..", "deploy", "grafana", "tresor.json")
)

// prometheusTool returns the path of Debian's promtool or prometheus binary.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("the alert tests need Debian's prometheus package (apt-get install -y prometheus; scripts/test-services.sh installs it): %v", err)
	}
	return path
}

// TestAlertRulesAreValidAndPassTheirUnitTests: promtool accepts the rule
// files of serve and of the vault, and every alert fires on the series
// that should raise it and on no other (their _test.yml).
func TestAlertRulesAreValidAndPassTheirUnitTests(t *testing.T) {
	t.Parallel()
	promtool := prometheusTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests},
		{"check", "rules", vaultRules}, {"test", "rules", vaultRuleTests}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestPrometheusAlertsWhenServeStops runs a real Prometheus scraping a real
// `tresor serve` with the shipped rules (their `for` shortened to seconds):
// every metric the rules and the dashboard read on the embedded default is
// scraped, every dashboard query runs, the reconciliation's difference is
// 0 after plays; TresorUnavailable is silent while serve is ready, fires
// once it is killed, and clears once it is back.
func TestPrometheusAlertsWhenServeStops(t *testing.T) {
	t.Parallel()
	bin := prometheusTool(t, "prometheus")
	data := t.TempDir()
	s := startServe(t, data)
	op, p42 := s.fundedPlayer()
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	for n := 1; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + play["play_id"].(string) + "/throws", p42, "", fmt.Sprintf(`{"throw":%d}`, n)})
	}
	s.must(200, call{"GET", "/v1/players/p-42/account", op, "", ""})
	target := strings.TrimPrefix(s.url, "http://")
	prom := startPrometheus(t, bin, target)

	for _, metric := range []string{"tresor_ready", "tresor_writer_seq", "tresor_projection_seq", "tresor_seal_seq", "tresor_projection_lag_events",
		"tresor_reconciliation_difference_cents", "tresor_data_free_bytes", "tresor_http_requests_total", "tresor_http_request_seconds_bucket",
		"tresor_append_seconds_bucket", "tresor_significant_events_total"} {
		prom.waitFor(t, metric, func(v []promSample) string {
			if len(v) == 0 {
				return "no series"
			}
			return ""
		})
	}
	prom.waitFor(t, "tresor_ready", valueIs("1"))
	prom.waitFor(t, "tresor_reconciliation_difference_cents", valueIs("0"))
	prom.waitFor(t, "tresor_data_free_bytes > 0", func(v []promSample) string {
		if len(v) != 1 {
			return "no free space read"
		}
		return ""
	})
	for _, expr := range dashboardQueries(t) {
		prom.query(t, expr)
	}
	if state := prom.alert(t, "TresorUnavailable"); state != "" {
		t.Fatalf("TresorUnavailable is %s while serve is ready", state)
	}

	s.kill()
	prom.waitAlert(t, "TresorUnavailable", "firing")
	s2 := startServe(t, data, "--http", target)
	defer s2.stop()
	prom.waitAlert(t, "TresorUnavailable", "")
}

// dashboardQueries returns every query of the shipped dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	var out []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			out = append(out, q.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no query", dashboard)
	}
	return out
}

// promServer is a real Prometheus run by a test.
type promServer struct {
	url    string
	client *http.Client
}

// promSample is one sample of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// startPrometheus runs Prometheus scraping target every second under the
// job "tresor", with the shipped rules evaluated every second and each
// rule's `for` cut to 2 s, and waits until it answers.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	return startPrometheusOn(t, bin, alertRules, "tresor", target)
}

// startPrometheusOn is startPrometheus with the rules of file, scraping
// target under job.
func startPrometheusOn(t *testing.T, bin, file, job, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+)for: \S+$`).ReplaceAll(rules, []byte("${1}for: 2s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yml]\n"+
		"scrape_configs:\n  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", job, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs strings.Builder
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	p.eventually(t, "Prometheus ready", func() string {
		resp, err := p.client.Get(p.url + "/-/ready")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return ""
	})
	return p
}

// promWait bounds each wait on Prometheus: scrapes and rule evaluations
// come every second, so this only tells "never" from "late".
const promWait = 90 * time.Second

// eventually polls check until it returns "" or promWait passes.
func (p *promServer) eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(promWait)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, promWait, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get decodes the data of a Prometheus API answer into v; it fails the
// test on an answer other than success.
func (p *promServer) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := p.client.Get(p.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Status != "success" {
		t.Fatalf("GET %s: %s %v %s", path, out.Status, err, out.Error)
	}
	if err := json.Unmarshal(out.Data, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// query runs an instant query and returns its samples.
func (p *promServer) query(t *testing.T, expr string) []promSample {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &data)
	var samples []promSample
	if data.ResultType == "vector" {
		if err := json.Unmarshal(data.Result, &samples); err != nil {
			t.Fatalf("query %s: %v", expr, err)
		}
	}
	return samples
}

// waitFor polls the query expr until check finds its samples right ("").
func (p *promServer) waitFor(t *testing.T, expr string, check func([]promSample) string) {
	t.Helper()
	p.eventually(t, "query "+expr, func() string { return check(p.query(t, expr)) })
}

// valueIs checks that a query answers one sample of value want.
func valueIs(want string) func([]promSample) string {
	return func(v []promSample) string {
		if len(v) != 1 || v[0].Value[1] != want {
			return fmt.Sprintf("got %v, want one sample of %s", v, want)
		}
		return ""
	}
}

// alert returns the state of the alert name ("pending", "firing"), "" when
// it is not active.
func (p *promServer) alert(t *testing.T, name string) string {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", &data)
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			return a.State
		}
	}
	return ""
}

// waitAlert polls until the alert name is in state ("" for not active).
func (p *promServer) waitAlert(t *testing.T, name, state string) {
	t.Helper()
	p.eventually(t, fmt.Sprintf("alert %s %q", name, state), func() string {
		if got := p.alert(t, name); got != state {
			return fmt.Sprintf("it is %q", got)
		}
		return ""
	})
}
