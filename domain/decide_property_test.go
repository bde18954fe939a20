package domain

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRandomCommandsKeepEveryInvariant drives random sequences of commands
// from many players — deposits, withdrawals, stakes at every price, throws,
// retries with the same key and with a reused key, limit changes,
// self-exclusion, abandoned plays completed by the system, sell-outs and
// closes — and checks every invariant of the write side after each step.
func TestRandomCommandsKeepEveryInvariant(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runRandomCommands(t, seed, 3000) })
	}
}

// runRandomCommands returns the world it drove, for tests of what the
// ledger holds afterwards.
func runRandomCommands(t *testing.T, seed uint64, steps int) *world {
	rng := rand.New(rand.NewPCG(seed, 42))
	w := newWorld(t)
	books := NewBooks()
	players := []string{"p0", "p1", "p2", "p3", "p4"}
	prices := []Amount{50, 100, 200}
	seeds := map[string]Seed{}   // block → seed, to close it
	lastUnit := map[string]int{} // block → last unit assigned
	settledTiers := map[string]*[TierCount]int{}
	var keys []struct {
		player string
		cmd    Command
	}
	nextSeed := byte(0)
	prepare := func(price Amount) *PreparedBlock {
		nextSeed++
		return prepared(t, w.l.Rules, price, nextSeed)
	}
	apply := func(c Command) (Decision, error) {
		d, err := Decide(w.l, w.now, c)
		if err != nil {
			if CodeOf(err) == CodeInternal {
				t.Fatalf("step %T: internal error %v", c, err)
			}
			return d, err
		}
		for _, e := range d.Events {
			if err := w.l.Evolve(w.now, e); err != nil {
				t.Fatalf("evolve %s: %v", e.EventType(), err)
			}
			if err := books.Apply(e); err != nil {
				t.Fatalf("books: %v", err)
			}
			switch e := e.(type) {
			case *UnitAssigned:
				// Each unit once, in deck order, from the stake's block.
				if _, seen := lastUnit[e.Block]; seen && int(e.Proof.Unit) != lastUnit[e.Block]+1 {
					t.Fatalf("block %s: unit %d assigned after %d", e.Block, e.Proof.Unit, lastUnit[e.Block])
				}
				if _, seen := lastUnit[e.Block]; !seen && e.Proof.Unit != 0 {
					t.Fatalf("block %s: first unit %d", e.Block, e.Proof.Unit)
				}
				lastUnit[e.Block] = int(e.Proof.Unit)
				b := w.l.Blocks[e.Block]
				if err := VerifyUnitProof(b.Commitment.Root, b.Commitment.Units, e.Proof); err != nil {
					t.Fatal(err)
				}
			case *PlaySettled:
				if settledTiers[e.Block] == nil {
					settledTiers[e.Block] = &[TierCount]int{}
				}
				settledTiers[e.Block][e.Tier]++
			case *BlockOpened:
				// Seeds are prepared from the counter; remember which.
				for s := byte(1); s <= nextSeed; s++ {
					p := prepared(t, w.l.Rules, e.Price, s)
					if p.Deck.Commitment == e.Commitment {
						seeds[e.Block] = p.Seed
					}
				}
			}
		}
		return d, nil
	}

	for _, p := range players {
		apply(ConfigureAccount{Player: p, DepositLimit: amt("200"), StakeLimit: amt("150")})
	}
	for _, price := range prices {
		apply(CreateEmission{Price: price, Blocks: 3, First: prepare(price)})
	}
	for step := 0; step < steps; step++ {
		w.now = w.now.Add(time.Duration(rng.IntN(600)) * time.Second)
		for _, id := range w.l.NextToPrepare() {
			w.l.Prepare(id, prepare(w.l.Emissions[id].Price))
		}
		p := players[rng.IntN(len(players))]
		var c Command
		switch r := rng.IntN(100); {
		case r < 10:
			c = Deposit{Player: p, Amount: Amount(100 * (1 + rng.IntN(30))), Key: fmt.Sprintf("k%d", step)}
		case r < 14:
			c = Withdraw{Player: p, Amount: Amount(100 * (1 + rng.IntN(20))), Key: fmt.Sprintf("k%d", step)}
		case r < 40:
			c = PlaceStake{Player: p, Stake: prices[rng.IntN(3)], Key: fmt.Sprintf("k%d", step)}
		case r < 75:
			for id, pl := range w.l.Plays {
				if pl.Player == p || rng.IntN(4) == 0 { // sometimes a foreign play
					c = MakeThrow{Player: p, Play: id}
					break
				}
			}
		case r < 80:
			for id := range w.l.Plays {
				c = CompletePlay{Play: id}
				break
			}
		case r < 88 && len(keys) > 0:
			k := keys[rng.IntN(len(keys))]
			c = k.cmd // a retry with the same key and request
		case r < 91 && len(keys) > 0:
			k := keys[rng.IntN(len(keys))]
			if d, ok := k.cmd.(Deposit); ok {
				d.Amount++
				c = d // the same key with another request
			}
		case r < 94:
			c = ConfigureAccount{Player: p, StakeLimit: amt(fmt.Sprint(50 + rng.IntN(200)))}
		case r < 95 && p == "p4":
			c = ConfigureAccount{Player: p, SelfExcluded: true}
		case r < 100:
			for id, b := range w.l.Blocks {
				if b.State != BlockStateClosed && b.InPlay == 0 {
					c = CloseBlock{Block: id, Seed: seeds[id]}
					break
				}
			}
		}
		if c == nil {
			continue
		}
		before := books.Events
		d, err := apply(c)
		if err != nil && books.Events != before {
			t.Fatalf("refused %T recorded events", c)
		}
		if err == nil && d.Replay == nil && len(d.Events) > 0 {
			switch c.(type) {
			case Deposit, Withdraw, PlaceStake:
				keys = append(keys, struct {
					player string
					cmd    Command
				}{p, c})
			}
		}
		if d.Replay != nil && len(d.Events) != 0 {
			t.Fatalf("a retry recorded events")
		}
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("%T: untyped error %v", c, err)
			}
		}
		// Invariants after every step.
		for id, a := range w.l.Accounts {
			if a.Balance < 0 || a.Balance != books.Balances[PlayerAccount(id)] {
				t.Fatalf("step %d: account %s balance %s, books %s", step, id, a.Balance, books.Balances[PlayerAccount(id)])
			}
			if a.SelfExcluded && len(d.Events) > 0 {
				if s, ok := d.Events[0].(*StakePlaced); ok && s.Player == id {
					t.Fatalf("self-excluded %s staked", id)
				}
			}
		}
		if _, err := books.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for id, b := range w.l.Blocks {
			if b.State != BlockStateOpen && b.Sold == w.l.Rules.BlockUnits && b.InPlay == 0 {
				table, _ := w.l.Rules.Table(b.Price)
				if got := settledTiers[id]; got == nil || *got != table.LotCounts() || b.Prizes != table.Total {
					t.Fatalf("sold-out block %s paid %v (%s), want %v (%s)", id, got, b.Prizes, table.LotCounts(), table.Total)
				}
			}
		}
	}
	return w
}
