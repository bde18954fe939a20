package api

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/personal/personaltest"
)

// TestAnswersRevealSealedFields writes sealed fields into a JSON answer, a
// CSV cell and a problem's detail, with a real keyring: each reads as its
// text, quoted as its place needs, and as "[erased]" once its key is gone.
func TestAnswersRevealSealedFields(t *testing.T) {
	ring := personaltest.New(t).Ring
	owner := domain.Owner{Player: "p-1"}
	quoted, err := ring.Seal(owner, `he said "stop", then left`)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Personal: ring, Logger: slog.Default()}}
	ctx := context.Background()
	for _, c := range []struct {
		name, in string
		mode     revealMode
		want     string
	}{
		{"json", `{"reason":"` + quoted + `","n":1}`, revealJSON, `{"reason":"he said \"stop\", then left","n":1}`},
		{"csv", "p-1," + quoted + ",3\n", revealCSV, "p-1,\"he said \"\"stop\"\", then left\",3\n"},
		{"text", "ban B1 records " + quoted + ".", revealText, `ban B1 records he said "stop", then left.`},
		{"text going on with a colon", "proposed by " + quoted + ": another", revealText, `proposed by he said "stop", then left: another`},
		{"nothing sealed", `{"reason":"sealed:v2"}`, revealJSON, `{"reason":"sealed:v2"}`},
	} {
		if got := string(s.reveal(ctx, []byte(c.in), c.mode)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	id, _, _ := ring.KeyOf(owner)
	if err := ring.Destroy(ctx, id, owner); err != nil {
		t.Fatal(err)
	}
	if got := string(s.reveal(ctx, []byte(`{"reason":"`+quoted+`"}`), revealJSON)); !strings.Contains(got, `"[erased]"`) {
		t.Fatalf("after the erasure: %s", got)
	}
}
