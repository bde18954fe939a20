package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// get sends an unauthenticated GET with extra headers and returns the
// answer with its body read.
func (s *server) get(path string, header http.Header) (*http.Response, string) {
	s.tb.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		s.tb.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := contractClient.Do(req)
	if err != nil {
		s.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		s.tb.Fatal(err)
	}
	return resp, string(b)
}

// TestCommitmentsArePublicAndVerifyPlayReadsThem: every block's commitment
// is readable without a token, paged, one by one and as a plain file, with
// an ETag caches revalidate; verify-play --commitments takes the root (and,
// once the block is closed, the seed) from them, and a play that does not
// match them is invalid.
func TestCommitmentsArePublicAndVerifyPlayReadsThem(t *testing.T) {
	t.Parallel()
	s := startServe(t, t.TempDir())
	op, p42 := s.fundedPlayer()
	play := s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	id, block := play["play_id"].(string), play["block_id"].(string)
	for n := 1; n <= 4; n++ {
		s.must(200, call{"POST", "/v1/players/p-42/plays/" + id + "/throws", p42, "", `{"throw":` + string(rune('0'+n)) + `}`})
	}
	report := s.must(200, call{"GET", "/v1/blocks/" + block, op, "", ""})

	resp, page := s.get("/v1/commitments", nil)
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || etag == "" || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age") {
		t.Fatalf("GET /v1/commitments: %d %v %s", resp.StatusCode, resp.Header, page)
	}
	var got struct {
		Commitments []struct {
			BlockID    string `json:"block_id"`
			Commitment struct {
				Root  string `json:"root"`
				Units int    `json:"units"`
			} `json:"commitment"`
			OpenedSeq float64 `json:"opened_seq"`
			Seed      string  `json:"seed"`
		} `json:"commitments"`
	}
	if err := json.Unmarshal([]byte(page), &got); err != nil || len(got.Commitments) != 1 {
		t.Fatalf("commitments page %s: %v", page, err)
	}
	c := got.Commitments[0]
	root := report["commitment"].(map[string]any)["root"].(string)
	if c.BlockID != block || c.Commitment.Root != root || c.Commitment.Units != 450000 || c.OpenedSeq < 1 || c.Seed != "" ||
		report["opened_seq"] != c.OpenedSeq {
		t.Fatalf("commitment %+v, block report %v", c, report)
	}
	// The ETag alone, among others, weak, in a second field, or "*": 304
	// (RFC 9110's weak comparison); another ETag: the page.
	for _, inm := range [][]string{{etag}, {`"x", ` + etag}, {"W/" + etag}, {`"x"`, etag}, {"*"}} {
		if resp, body := s.get("/v1/commitments", http.Header{"If-None-Match": inm}); resp.StatusCode != 304 || body != "" {
			t.Fatalf("revalidation with If-None-Match %q: %d %q", inm, resp.StatusCode, body)
		}
	}
	if resp, _ := s.get("/v1/commitments", http.Header{"If-None-Match": {`"x", W/"y"`}}); resp.StatusCode != 200 {
		t.Fatalf("If-None-Match naming other ETags: %d, want the page", resp.StatusCode)
	}
	if resp, one := s.get("/v1/commitments/"+block, nil); resp.StatusCode != 200 || !strings.Contains(one, root) {
		t.Fatalf("one commitment: %d %s", resp.StatusCode, one)
	}
	if resp, _ := s.get("/v1/commitments/E0009-B001", nil); resp.StatusCode != 404 {
		t.Fatalf("unknown block's commitment: %d", resp.StatusCode)
	}
	resp, file := s.get("/v1/commitments.ndjson", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || strings.Count(file, "\n") != 1 || !strings.Contains(file, root) {
		t.Fatalf("commitments file: %d %v %q", resp.StatusCode, resp.Header, file)
	}

	save := saver(t, t.TempDir())
	played := save("play.json", s.getText("/v1/players/p-42/plays/"+id, p42))
	url := s.url + "/v1/commitments.ndjson"
	out, stderr, code := run(t, "verify-play", "--file", played, "--commitments", url)
	if code != 0 || !strings.Contains(out, "root "+root+": the root published at "+url+" (independent)") || !strings.Contains(out, "pass  root") {
		t.Fatalf("verify-play --commitments: exit %d\n%s%s", code, out, stderr)
	}
	// A mirror that disagrees with the play, or that lacks its block.
	other := save("other.ndjson", strings.Replace(file, root, strings.Repeat("ab", 32), 1))
	if out, _, code := run(t, "verify-play", "--file", played, "--commitments", other); code != 1 || !strings.Contains(out, "fail  root") || !strings.Contains(out, "fail  inclusion_proof") {
		t.Fatalf("verify-play against another root: exit %d\n%s", code, out)
	}
	missing := save("missing.ndjson", strings.Replace(file, block, "E0009-B001", 1))
	if out, _, code := run(t, "verify-play", "--file", played, "--commitments", missing); code != 1 || !strings.Contains(out, "not among the commitments published at") {
		t.Fatalf("verify-play without the block's commitment: exit %d\n%s", code, out)
	}
	if _, _, code := run(t, "verify-play", "--file", played, "--commitments", url, "--root", root); code != exitUsage {
		t.Fatalf("--root with --commitments: exit %d", code)
	}

	// Once closed, the published seed rebuilds the deck.
	s.must(200, call{"POST", "/v1/blocks/" + block + "/close", op, "", `{"reason":"commitments test: reveal the seed"}`})
	if _, file = s.get("/v1/commitments.ndjson", nil); !strings.Contains(file, `"seed":"`) {
		t.Fatalf("closed block's commitment without its seed: %s", file)
	}
	out, stderr, code = run(t, "verify-play", "--file", played, "--commitments", url)
	if code != 0 || !strings.Contains(out, "pass  deck") || !strings.Contains(out, "seed: published at "+url) {
		t.Fatalf("verify-play --commitments on a closed block: exit %d\n%s%s", code, out, stderr)
	}
	s.stop()
}

// saver returns a function that writes a file in dir and returns its path.
func saver(tb testing.TB, dir string) func(name, body string) string {
	return func(name, body string) string {
		tb.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
		return f
	}
}
