package settlement

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fdj/tresor/domain"
)

// A suspension decided while stakes are still committing takes its place
// in the stream right after them: the writer decides in the order commands
// reach it and applies each decision before the next, so every stake of
// the scope decided after the suspension is refused, and none follows it
// in the stream, however many were in flight around it.
func TestASuspensionDecidedWhileStakesCommitHasNoStakeAfterIt(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	n.w.Close()
	w, h := n.openHeld()
	const players = 8
	for i := range players {
		fundedPlayer(t, w, fmt.Sprint("p", i), 10_000)
	}
	exec(t, w, domain.CreateEmission{Price: 100, Blocks: 1})
	exec(t, w, domain.CreateEmission{Price: 200, Blocks: 1})

	// given stakes of both prices whose appends are not yet acknowledged
	release := h.holdAnswers()
	defer release(false)
	var inFlight []<-chan answer
	for i := range players {
		inFlight = append(inFlight, executeAsync(w, domain.PlaceStake{Player: fmt.Sprint("p", i), Stake: 100, Key: "before"}))
	}
	decided(t, w, func(l *domain.Ledger) bool { return len(l.Plays) == players })
	// when the 1 € sales are suspended among them, and players go on
	// staking from every side
	suspension := executeAsync(w, domain.SuspendSales{Scope: "price:1.00", Reason: "screen fault", By: staff})
	decided(t, w, func(l *domain.Ledger) bool { return len(l.Suspensions) == 1 })
	var wg sync.WaitGroup
	refusals := make(chan error, 2*players)
	for i := range players {
		for _, price := range []domain.Amount{100, 200} {
			wg.Go(func() {
				_, err := w.Execute(t.Context(), domain.PlaceStake{Player: fmt.Sprint("p", i), Stake: price, Key: fmt.Sprint("after-", price)})
				if err != nil {
					refusals <- fmt.Errorf("%s: %w", price, err)
				}
			})
		}
	}
	release(false)
	wg.Wait()
	close(refusals)
	// then the stakes before it are taken, the 1 € ones after it refused
	// naming it, the 2 € ones taken
	for _, c := range inFlight {
		if a := <-c; a.err != nil {
			t.Fatalf("a stake decided before the suspension: %v", a.err)
		}
	}
	if a := <-suspension; a.err != nil {
		t.Fatal(a.err)
	}
	refused := 0
	for err := range refusals {
		if !errors.Is(err, domain.ErrSalesSuspended) {
			t.Fatalf("a stake after the suspension: %v", err)
		}
		refused++
	}
	if refused != players {
		t.Fatalf("%d stakes refused, want the %d of 1 €", refused, players)
	}
	// and the stream holds no 1 € stake after the suspension
	_, _, events := n.replay()
	at, before, after := -1, 0, 0
	for i, e := range events {
		switch e := e.(type) {
		case *domain.SalesSuspended:
			at = i
		case *domain.StakePlaced:
			switch {
			case e.Stake == 100 && at >= 0:
				t.Fatalf("stake %s of %s at %d follows the suspension at %d", e.Play, e.Stake, i, at)
			case e.Stake == 100:
				before++
			case at >= 0:
				after++
			}
		}
	}
	if at < 0 || before != players || after != players {
		t.Fatalf("suspension at %d, %d stakes of 1 € before it, %d of 2 € after it", at, before, after)
	}
}
