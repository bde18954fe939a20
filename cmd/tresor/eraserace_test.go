package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestErasureApprovalsRacedAndKilled tries four eyes on erasures as an
// outsider would. Two approvals and a rejection of one erasure sent at
// once: one decision is recorded, and every answer agrees with it. Then
// approvals of other erasures, each with serve killed with SIGKILL a
// random moment after it is sent: once serve is back, each erasure is
// either approved and its data key gone from the store, or still pending
// with its key held, never approved with its key kept; approved again, it
// is erased once.
func TestErasureApprovalsRacedAndKilled(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startServe(t, data)
	bob := s.staffToken("operator", "bob@fdj.fr")
	staff := map[string]string{}
	for _, who := range []string{"dave", "erin", "frank"} {
		staff[who] = s.staffToken("operator", who+"@fdj.fr")
	}
	propose := func(p string) map[string]any {
		s.must(200, call{"PUT", "/v1/players/" + p, bob, "", `{"weekly_deposit_limit":"10.00","weekly_stake_limit":"10.00"}`})
		s.must(201, call{"POST", "/v1/players/" + p + "/bans", bob, "", `{"reference":"ANJ-7","reason":"told us of a gambling problem"}`})
		s.must(200, call{"POST", "/v1/players/" + p + "/closure", bob, "", `{"reason":"asked by the player"}`})
		return s.must(202, call{"POST", "/v1/erasures", bob, "", `{"player":"` + p + `","legal_ground":"GDPR art. 17"}`})
	}
	approve := func(id, who string) call { return call{"POST", "/v1/erasures/" + id + "/approve", staff[who], "", ""} }

	raced := propose("p-1")["id"].(string)
	answers := s.atOnce(approve(raced, "dave"), approve(raced, "erin"),
		call{"POST", "/v1/erasures/" + raced + "/reject", staff["frank"], "", `{"reason":"no request on file"}`})
	state := s.must(200, call{"GET", "/v1/erasures/" + raced, bob, "", ""})["state"]
	wins := map[string]int{"approved": 200, "rejected": 409}
	if state == "rejected" {
		wins = map[string]int{"approved": 409, "rejected": 200}
	} else if state != "approved" {
		t.Fatalf("erasure %s after the race: %v, want approved or rejected", raced, state)
	}
	for i, a := range answers {
		kind := "approved"
		if i == 2 {
			kind = "rejected"
		}
		if a.status != wins[kind] || (a.status == 200 && a.body["state"] != state) {
			t.Errorf("answer %d to the race (erasure %s): %d %v", i, state, a.status, a.body)
		}
	}

	// Each approval killed at a random moment: the key outlives its
	// erasure only while the writer is down.
	keys := map[string]string{}
	for _, p := range []string{"p-2", "p-3", "p-4", "p-5"} {
		x := propose(p)
		id := x["id"].(string)
		keys[id] = x["key_id"].(string)
		sent := make(chan struct{})
		go func() {
			close(sent)
			s.send(approve(id, "dave")) // its answer is lost with serve
		}()
		<-sent
		time.Sleep(time.Duration(rand.IntN(40_000)) * time.Microsecond)
		s.kill()
		s = startServe(t, data)
	}
	s.stop()
	held := dataKeysHeld(t, data, keys)
	s = startServe(t, data)
	for id := range keys {
		got := s.must(200, call{"GET", "/v1/erasures/" + id, bob, "", ""})["state"]
		switch {
		case got == "approved" && held[id]:
			t.Errorf("erasure %s approved, but its data key %s is still held once serve is back", id, keys[id])
		case got == "pending" && !held[id]:
			t.Errorf("erasure %s pending, but its data key %s is gone", id, keys[id])
		case got != "approved" && got != "pending":
			t.Errorf("erasure %s after its approval was killed: %v", id, got)
		}
		if again := s.must(200, approve(id, "erin")); again["state"] != "approved" {
			t.Errorf("erasure %s approved again: %v", id, again)
		}
	}
	s.stop()
	for id, h := range dataKeysHeld(t, data, keys) {
		if h {
			t.Errorf("erasure %s approved twice over, and its data key %s is still held", id, keys[id])
		}
	}
	want := len(keys)
	if state == "approved" {
		want++
	}
	types, _ := exportTypes(t, "--data", data)
	if got := types["PersonalDataErased"]; got != want || types["PersonalDataErasureRejected"] != 1-want+len(keys) {
		t.Errorf("after the race (%v) and %d approvals killed: %v", state, len(keys), types)
	}
}

// dataKeysHeld opens the data directory's JetStream while serve is
// stopped and reports, for each erasure's key id, whether its data key is
// still in the store.
func dataKeysHeld(tb testing.TB, data string, keys map[string]string) map[string]bool {
	tb.Helper()
	srv := eventstoretest.RunEmbedded(tb, filepath.Join(data, "jetstream"))
	defer srv.Shutdown()
	store := eventstoretest.OpenEmbedded(tb, srv, eventstore.Config{ReadOnly: true})
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dk, err := store.BindDataKeys(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	held := map[string]bool{}
	for id, key := range keys {
		_, _, err := dk.Get(ctx, "k."+key)
		switch {
		case err == nil:
			held[id] = true
		case !errors.Is(err, eventstore.ErrKeyNotFound):
			tb.Fatal(fmt.Errorf("data key %s: %w", key, err))
		}
	}
	return held
}

// TestCommandsWaitForADataKeysBucketOutOfReach gives serve, on a NATS
// server of its own, staff commands while the data keys' bucket does not
// answer (its stream deleted under it): a command that needs a key the
// process does not hold is answered 503 with Retry-After and records
// nothing; once serve is back with its bucket, the same command with the
// same key is recorded once.
func TestCommandsWaitForADataKeysBucketOutOfReach(t *testing.T) {
	t.Parallel()
	url := "nats://" + runAuthServer(t, "")
	data := t.TempDir()
	writeClusterKeys(t, data)
	s := startServe(t, data, "--nats", url)
	s.retryUnavailable = false // the 503 is what this test looks at
	alice, bob := s.staffToken("operator", "alice@fdj.fr"), s.staffToken("operator", "bob@fdj.fr")
	s.must(200, call{"PUT", "/v1/players/p-1", alice, "", `{"weekly_deposit_limit":"100.00","weekly_stake_limit":"100.00"}`})
	if err := jetStreamAt(t, url).DeleteStream(t.Context(), "KV_"+eventstore.DataKeysBucket); err != nil {
		t.Fatal(err)
	}
	deposit := call{"POST", "/v1/players/p-1/deposits", bob, "d1", `{"amount":"10.00"}`}
	for range 2 {
		req, err := http.NewRequest(deposit.method, s.url+deposit.path, strings.NewReader(deposit.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+bob)
		req.Header.Set("Idempotency-Key", deposit.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"unavailable"`) {
			t.Fatalf("a deposit by a subject whose key is out of reach: %d, Retry-After %q, %s; want 503 unavailable with Retry-After",
				resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	if b := s.must(200, call{"GET", "/v1/players/p-1/account", alice, "", ""})["balance"]; b != "0.00" {
		t.Fatalf("balance %v after deposits answered 503, want 0.00", b)
	}
	s.stop()
	s = startServe(t, data, "--nats", url)
	if got := s.must(200, deposit)["balance_after"]; got != "10.00" {
		t.Fatalf("the deposit sent again once the bucket is back: balance %v, want 10.00", got)
	}
	if got := s.must(200, deposit)["balance_after"]; got != "10.00" {
		t.Fatalf("the deposit sent a third time: balance %v, want 10.00 (answered, not recorded again)", got)
	}
	s.stop()
	if types, _ := exportTypes(t, "--nats", url); types["FundsDeposited"] != 1 {
		t.Fatalf("deposits in the stream: %v, want one", types)
	}
}
