package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/personal"
	"github.com/spf13/cobra"
)

// eraseOptions are erase's own flags.
type eraseOptions struct {
	player, subject, legalGround string
	replayFrom                   []string
	caller
}

// caller is how erase and its subcommands reach the server: its base URL,
// and whom the operator token they mint names.
type caller struct {
	as, base string
}

// eraseTokenTTL is how long the token erase mints for its one request
// lives.
const eraseTokenTTL = 5 * time.Minute

// eraseAnswerMax bounds the answer erase reads.
const eraseAnswerMax = 64 << 10

// newEraseCmd is the tresor erase command: it proposes an erasure, or
// replays recorded ones, and its subcommands approve, reject or list
// them.
func newEraseCmd() *cobra.Command {
	var cfg Config
	var o eraseOptions
	cmd := &cobra.Command{
		Use:   "erase (--player ID | --subject WHO) [--legal-ground TEXT] [--url BASE] [--as WHO] | --replay-from FILE... [--data DIR | --nats URL]",
		Short: "Propose the erasure of a player's or a staff subject's personal data on a running server (POST /v1/erasures)",
		Long: "erase asks the server at --url to erase a person's personal data. An erasure cannot be undone, so it is\n" +
			"proposed (PersonalDataErasureProposed) and recorded only once another operator approves it (tresor erase\n" +
			"approve ID): the writer then records PersonalDataErased (who, why, when, whose; never the data) and\n" +
			"destroys the person's data key, and every field sealed under it reads \"[erased]\" (docs/privacy.md). A\n" +
			"player's is refused while the retention period after the account's closure runs, unless --legal-ground\n" +
			"gives a legal ground, which is recorded; a staff subject's always needs one. The request goes with an\n" +
			"operator token minted with the server's token key for --as (default: the login running tresor erase),\n" +
			"who the proposal records. It prints the erasure, pending, with its id.\n" +
			"--replay-from applies again, to the data keys bucket beside the stream of --data or --nats, every\n" +
			"erasure recorded in export files (tresor export, a backup's parts): for a ledger restored from a\n" +
			"backup taken before them, with serve stopped (docs/privacy.md, \"Backups\").",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.replayFrom) > 0 {
				if o.player != "" || o.subject != "" || o.legalGround != "" {
					return usagef("--replay-from: replays recorded erasures; --player, --subject and --legal-ground propose a new one")
				}
				return runReplayErasures(cmd.Context(), &cfg, o.replayFrom, cmd.OutOrStdout())
			}
			if (o.player == "") == (o.subject == "") {
				return usagef("give --player or --subject (one of them)")
			}
			body := map[string]string{"player": o.player, "subject": o.subject, "legal_ground": o.legalGround}
			return o.call(cmd.Context(), &cfg, http.MethodPost, "/v1/erasures", body, cmd.OutOrStdout())
		},
	}
	bindStreamFlags(cmd, &cfg)
	bindCaller(cmd, &cfg, &o.caller, "who proposes the erasure, recorded with it")
	f := cmd.Flags()
	f.StringVar(&o.player, "player", "", "the player whose personal data is erased")
	f.StringVar(&o.subject, "subject", "", "the staff subject (a token's subject, such as alice@fdj.fr) whose personal data is erased")
	f.StringVar(&o.legalGround, "legal-ground", "", "the legal ground of an erasure before the retention period ends (recorded)")
	f.StringArrayVar(&o.replayFrom, "replay-from", nil, "an export file whose erasures to apply again to the data keys bucket (repeat for several); with --data (serve stopped) or --nats")
	cmd.AddCommand(newEraseDecisionCmd("approve"), newEraseDecisionCmd("reject"), newErasePendingCmd())
	return cmd
}

// replayReport is what tresor erase --replay-from prints.
type replayReport struct {
	// ErasedKeys are the data keys the files' erasures destroyed;
	// EntriesDestroyed the bucket's entries of them destroyed now (none
	// for an erasure the bucket had applied already).
	ErasedKeys       int `json:"erased_keys"`
	EntriesDestroyed int `json:"entries_destroyed"`
}

// runReplayErasures destroys, in the bucket beside the stream, the data
// keys of every erasure recorded in files: a bucket restored from a backup
// holds the keys of the persons erased after its position, whose erasures
// are in a newer copy of the stream (the regulator's vault, an export, a
// newer backup). Serve must not be running on the embedded default: a
// running serve keeps the keys it has read until it stops.
func runReplayErasures(ctx context.Context, cfg *Config, files []string, out io.Writer) error {
	erased := map[string]bool{}
	for _, f := range files {
		if err := readErasures(f, 0, erased); err != nil {
			return fmt.Errorf("--replay-from %s: %w", f, err)
		}
	}
	st, err := openStreamReadOnly(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.NATSURL == "" && st.embedded == nil {
		return fmt.Errorf("data directory %s is in use by a running serve: stop it first (it keeps the keys it has read until it stops)", cfg.Data)
	}
	rep := replayReport{ErasedKeys: len(erased)}
	keys, err := st.store.BindDataKeys(ctx)
	if err == nil {
		rep.EntriesDestroyed, err = personal.DestroyErased(ctx, keys, erased)
	}
	if err != nil && !errors.Is(err, eventstore.ErrNoDataKeys) {
		return err
	}
	return writeJSON(out, rep)
}

// newEraseDecisionCmd is tresor erase approve, or tresor erase reject.
func newEraseDecisionCmd(verb string) *cobra.Command {
	var cfg Config
	var c caller
	var reason string
	use, short := "approve ID [--url BASE] [--as WHO]", "Approve a pending erasure: it is recorded, and the person's data key destroyed"
	if verb == "reject" {
		use, short = "reject ID --reason TEXT [--url BASE] [--as WHO]", "Reject a pending erasure, with a reason: nothing is erased"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short + " (POST /v1/erasures/ID/" + verb + ")",
		Long: short + ", on the running server at --url, with an operator token minted for --as (default: the login\n" +
			"running it), who the decision records: never the erasure's proposer (403 four_eyes). It prints the erasure.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body any = struct{}{}
			if verb == "reject" {
				if reason == "" {
					return usagef("--reason: required")
				}
				body = map[string]string{"reason": reason}
			}
			return c.call(cmd.Context(), &cfg, http.MethodPost, "/v1/erasures/"+url.PathEscape(args[0])+"/"+verb, body, cmd.OutOrStdout())
		},
	}
	bindDataFlag(cmd, &cfg)
	bindCaller(cmd, &cfg, &c, "who decides, recorded with the decision")
	if verb == "reject" {
		cmd.Flags().StringVar(&reason, "reason", "", "why the erasure is rejected (recorded)")
	}
	return cmd
}

// newErasePendingCmd is tresor erase pending.
func newErasePendingCmd() *cobra.Command {
	var cfg Config
	var c caller
	cmd := &cobra.Command{
		Use:   "pending [--url BASE] [--as WHO]",
		Short: "List the erasures awaiting --as's approval: pending, proposed by someone else (GET /v1/erasures)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd.Context(), &cfg, http.MethodGet, "/v1/erasures?state=pending&awaiting=me", nil, cmd.OutOrStdout())
		},
	}
	bindDataFlag(cmd, &cfg)
	bindCaller(cmd, &cfg, &c, "whose approval the erasures await")
	return cmd
}

// bindCaller adds the flags of a command that calls the server: the token
// key, where, and as whom (as says what that subject is to the command).
func bindCaller(cmd *cobra.Command, cfg *Config, c *caller, as string) {
	bindTokenFlag(cmd, cfg)
	cmd.Flags().StringVar(&c.as, "as", "", as+" (default: the login running tresor erase)")
	cmd.Flags().StringVar(&c.base, "url", "http://127.0.0.1:8080", "base URL of the server's API")
}

// call mints the operator token, sends one request (body as JSON, none
// for nil) and prints the answer.
func (c caller) call(ctx context.Context, cfg *Config, method, path string, body any, out io.Writer) error {
	u, err := url.Parse(c.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--url %q: want the server's base URL, such as http://127.0.0.1:8080", c.base)
	}
	tokens, err := cfg.tokens(false)
	if err != nil {
		return err
	}
	if c.as == "" {
		if c.as, err = loginSubject(); err != nil {
			return err
		}
	}
	tok, err := tokens.MintFor(api.RoleOperator, c.as, "", eraseTokenTTL, time.Now())
	if err != nil {
		return usagef("--as: %v", err)
	}
	var reqBody io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		reqBody = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(u.String(), "/")+path, reqBody)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("erase: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, eraseAnswerMax))
	if err != nil {
		return fmt.Errorf("erase: read the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var p struct{ Code, Detail string }
		json.Unmarshal(answer, &p)
		return fmt.Errorf("erase refused (%d %s): %s", resp.StatusCode, p.Code, p.Detail)
	}
	_, err = out.Write(answer)
	return err
}

// retentionOptions are retention's own flags.
type retentionOptions struct {
	at string
}

// newRetentionCmd is the tresor retention command.
func newRetentionCmd() *cobra.Command {
	var cfg Config
	var o retentionOptions
	cmd := &cobra.Command{
		Use:   "retention [--at YYYY-MM-DD]",
		Short: "List the players whose personal data is due for erasure (retention after the account's closure ended)",
		Long: "retention reads the stream (read-only) and lists, as one JSON object, the players whose account closed\n" +
			"longer ago than the settings' retention_after_closure_years (France: five years, docs/compliance.md)\n" +
			"and whose personal data is not erased yet, oldest closure first: erase each with tresor erase --player.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.NATSURL == "" && cfg.Data == "" {
				return usagef("--data: empty data directory")
			}
			at := time.Now().UTC()
			if o.at != "" {
				d, err := time.Parse(time.DateOnly, o.at)
				if err != nil {
					return usagef("--at %q: want YYYY-MM-DD", o.at)
				}
				at = d
			}
			return runRetention(cmd.Context(), &cfg, at, cmd.OutOrStdout())
		},
	}
	bindStreamFlags(cmd, &cfg)
	cmd.Flags().StringVar(&o.at, "at", "", "the day (UTC, YYYY-MM-DD) to list the players due at (default: now)")
	return cmd
}

// retentionReport is what tresor retention prints.
type retentionReport struct {
	At             time.Time             `json:"at"`
	RetentionYears int                   `json:"retention_after_closure_years"`
	StreamSeq      uint64                `json:"stream_seq"`
	Due            []domain.RetentionDue `json:"due"`
}

// runRetention folds the stream through a retention clock and prints who
// is due at at.
func runRetention(ctx context.Context, cfg *Config, at time.Time, out io.Writer) error {
	st, err := openStreamReadOnly(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	clock := domain.NewRetentionClock()
	last, err := st.store.ReadFrom(ctx, 1, func(r eventstore.RecordedEvent) error {
		switch r.Type {
		case domain.TypeAccountClosed, domain.TypeAccountReopened, domain.TypePersonalDataErased, domain.TypeSettingsAdopted:
		default:
			return nil
		}
		if !r.LedgerFact() {
			return nil
		}
		e, err := domain.DecodeEvent(r.Type, r.Payload)
		if err != nil {
			return fmt.Errorf("stream sequence %d: %w", r.Sequence, err)
		}
		clock.Apply(r.RecordedAt, e)
		return nil
	})
	if err != nil {
		return err
	}
	rep := retentionReport{At: at, RetentionYears: clock.Retention(), StreamSeq: last, Due: clock.Due(at)}
	if rep.Due == nil {
		rep.Due = []domain.RetentionDue{}
	}
	return writeJSON(out, rep)
}
