package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/settlement"
)

// steppingDown is a node whose writer steps down right after it answers:
// the interleaving of a writer resumed after a SIGSTOP, which answers the
// requests it held, while its renewal finds the lease lost.
type steppingDown struct{ *testNode }

func (s steppingDown) Execute(ctx context.Context, cmd domain.Command) (settlement.Result, error) {
	res, err := s.testNode.Execute(ctx, cmd)
	s.stop()
	<-s.done
	return res, err
}

// project applies the stream to mem up to sequence to, whole appends, as
// serve's projection runner does.
func project(tb testing.TB, store *eventstore.NATSStore, mem *memstore.Store, to uint64) {
	tb.Helper()
	ctx := eventstoretest.Ctx(tb, 30*time.Second)
	from, err := mem.Checkpoint(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var batch []projections.Envelope
	_, err = store.ReadFrom(ctx, from+1, func(r eventstore.RecordedEvent) error {
		if r.Sequence > to {
			return nil
		}
		env := projections.Envelope{Seq: r.Sequence, At: r.RecordedAt, AppendRemaining: r.AppendRemaining}
		if r.Type != eventstore.SealType {
			e, err := domain.DecodeEvent(r.Type, r.Payload)
			if err != nil {
				return err
			}
			env.Event = e
		}
		batch = append(batch, env)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := mem.Apply(ctx, batch); err != nil {
		tb.Fatal(err)
	}
}

// TestAThrowRetriedAsItsWriterStepsDownIsAnsweredFromTheHistory: the retry
// of a throw already made is answered as a replay by the node's writer,
// which steps down before the API reads the history. The API waits for the
// position the answer was decided at, not for the node's own position then
// (its writer gone, behind the throw), and answers the throw as the
// history records it, never 500 "recorded but not in the history".
func TestAThrowRetriedAsItsWriterStepsDownIsAnsweredFromTheHistory(t *testing.T) {
	c := eventstoretest.StartCluster(t)
	a := startNode(t, c, "a")
	waitRole(t, a, RoleWriter, 30*time.Second)
	ctx := eventstoretest.Ctx(t, time.Minute)
	if _, err := deposit(ctx, a, "p1", 10_000, "d1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Execute(ctx, domain.CreateEmission{Price: 50, Blocks: 1, By: operator}); err != nil {
		t.Fatal(err)
	}
	staked, err := a.Execute(ctx, domain.PlaceStake{Player: "p1", Stake: 50, Key: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	play := staked.Events[0].(*domain.StakePlaced).Play
	var last settlement.Result
	for n := 1; n <= domain.ThrowCount; n++ {
		if last, err = a.Execute(ctx, domain.MakeThrow{Player: "p1", Play: play, Throw: n}); err != nil {
			t.Fatalf("throw %d: %v", n, err)
		}
	}
	made := last.Events[0].(*domain.ThrowMade)

	// given projections that show the play up to its third throw
	mem := memstore.New(writerConfig(t).Rules)
	project(t, a.store, mem, last.Seqs[0]-1)
	tokens, err := api.NewTokens(testMasterKey)
	if err != nil {
		t.Fatal(err)
	}
	token, err := tokens.Mint(api.RolePlayer, "p1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(api.Config{Writer: steppingDown{a}, Store: mem, Tokens: tokens})

	// when throw 4 is retried and the writer steps down once it answered
	answer := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := httptest.NewRequest("POST", "/v1/players/p1/plays/"+play+"/throws", strings.NewReader(`{"throw":4}`))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		answer <- rec
	}()
	// then it waits for the projections to show the throw
	select {
	case rec := <-answer:
		t.Fatalf("answered before the projections showed throw 4: %d %s", rec.Code, rec.Body)
	case <-time.After(300 * time.Millisecond):
	}
	project(t, a.store, mem, last.LastSeq())
	rec := <-answer
	// and answers throw 4 as it was made
	var got struct {
		Throw int    `json:"throw"`
		Steps int    `json:"steps"`
		Seq   uint64 `json:"seq"`
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("retry of throw 4: %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Throw != 4 || got.Steps != made.Result.Steps || got.Seq < last.LastSeq() {
		t.Fatalf("retry of throw 4: %s, want throw 4 of %d steps at a position from %d", rec.Body, made.Result.Steps, last.LastSeq())
	}
	// and the node's position, which min_seq reads are checked against,
	// has not gone back behind what its writer answered
	if seq := a.LastSeq(); seq < last.LastSeq() {
		t.Fatalf("the node's last sequence after its writer stepped down: %d, want %d or later", seq, last.LastSeq())
	}
}
