package codec

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/domain"
)

// TestCommandCodecRoundTrip: every field of every kind of command comes
// back as it went.
// operator and selfP1 are the actors of the commands on the wire.
var (
	operator = &domain.Actor{Role: domain.RoleOperator, Subject: "alice@fdj"}
	selfP1   = &domain.Actor{Role: domain.RolePlayer, Subject: "p1"}
)

func TestCommandCodecRoundTrip(t *testing.T) {
	amt := domain.Amount(12345)
	until := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	cmds := []domain.Command{
		domain.ConfigureAccount{Player: "p1", DepositLimit: &amt, StakeLimit: &amt, Limits: []domain.LimitSetting{{Kind: domain.StakeLimit, PeriodDays: 30, Amount: 500}},
			SelfExcludedUntil: &until, By: operator, Reason: "asked by phone"},
		domain.ConfigureAccount{Player: "p2", SelfExcluded: true, LiftSelfExclusion: true, By: selfP1},
		domain.Deposit{Player: "p1", Amount: 10000, Key: "k1", By: operator},
		domain.Withdraw{Player: "p1", Amount: 2500, Key: "k2", By: operator},
		domain.CreateEmission{Price: 100, Blocks: 3, Key: "e1", By: operator},
		domain.PlaceStake{Player: "p1", Stake: 200, Key: "s1"},
		domain.MakeThrow{Player: "p1", Play: "B1-U000001", Throw: 3},
		domain.CompletePlay{Play: "B1-U000001"},
		domain.CloseBlock{Block: "B1", By: operator, Reason: "withdrawn"},
		domain.BanPlayer{Player: "p1", Reference: "ANJ-1", Reason: "court order", By: operator},
		domain.LiftBan{Player: "p1", Ban: "b1", Reference: "ANJ-2", Reason: "appeal", By: operator},
		domain.AdoptSettings{Settings: domain.BaselineSettings()},
		domain.SuspendSales{Scope: "price:2.00", Reason: "faulty scenario screen", By: operator},
		domain.ResumeSales{Suspension: "S1", Reason: "screen fixed", By: operator},
		domain.CloseAccount{Player: "p1", Reason: "asked by the player", By: selfP1},
		domain.ReopenAccount{Player: "p1", Reason: "closed by mistake", By: operator},
		domain.ResealSeeds{MasterKeyID: "0123456789abcdef", Seeds: []domain.ResealedSeed{{Block: "E0001-B001", SealedSeed: []byte{1, 2, 3}}}},
		domain.ProposeAdjustment{Player: "p1", Direction: domain.Credit, Kind: domain.Goodwill, Amount: 500,
			Reference: "ticket-7", Reason: "a slow page", By: operator},
		domain.ApproveAdjustment{Adjustment: "A1", By: &domain.Actor{Role: domain.RoleFinance, Subject: "fin"}},
		domain.RejectAdjustment{Adjustment: "A1", Reason: "no ticket", By: operator},
		domain.ErasePersonalData{Player: "p1", LegalGround: "GDPR art. 17", By: operator},
		domain.ApproveErasure{Erasure: "ER1", By: &domain.Actor{Role: domain.RoleOperator, Subject: "bob"}},
		domain.RejectErasure{Erasure: "ER1", Reason: "no request on file", By: operator},
	}
	for _, c := range cmds {
		data, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		got, err := DecodeCommand(data)
		if err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%T round trip:\n got %+v\nwant %+v", c, got, c)
		}
	}
}

// TestCommandCodecRefusesSecrets: a prepared block or a seed never goes on
// the wire, and is refused when it comes from it.
func TestCommandCodecRefusesSecrets(t *testing.T) {
	var seed domain.Seed
	seed[0] = 1
	for _, c := range []domain.Command{
		domain.CreateEmission{Price: 100, Blocks: 1, First: &domain.PreparedBlock{Seed: seed}},
		domain.CloseBlock{Block: "B1", Seed: seed},
	} {
		if _, err := EncodeCommand(c); !errors.Is(err, domain.ErrInvalidRequest) {
			t.Errorf("encode %T with a secret: got %v, want invalid_request", c, err)
		}
	}
	for _, wire := range []string{
		`{"kind":"close_block","command":{"Block":"B1","Seed":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}}`,
		`{"kind":"create_emission","command":{"Price":100,"Blocks":1,"First":{}}}`,
		`{"kind":"drop_tables","command":{}}`,
		`{"kind":"deposit","command":"not an object"}`,
		`not json`,
	} {
		if c, err := DecodeCommand([]byte(wire)); !errors.Is(err, domain.ErrInvalidRequest) {
			t.Errorf("decode %s: got %+v, %v; want invalid_request", wire, c, err)
		}
	}
}

// TestEveryCommandHasAKind parses the package's sources for the types with
// a command() marker method: each must be on the wire, or a standby could
// not forward it.
func TestEveryCommandHasAKind(t *testing.T) {
	files, err := filepath.Glob("../*.go")
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, c := range commandKinds {
		registered[reflect.TypeOf(c).Name()] = true
	}
	found := 0
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "command" || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			name := typ.(*ast.Ident).Name
			found++
			if !registered[name] {
				t.Errorf("%s: command %s has no kind in commandKinds", fset.Position(fn.Pos()), name)
			}
		}
	}
	if found != len(commandKinds) {
		t.Errorf("found %d command types in the sources, %d kinds registered", found, len(commandKinds))
	}
}
