package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fdj/tresor/audit"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/vault"
	"github.com/spf13/cobra"
)

// errPlayInvalid is verify-play's exit status 1: the play was read and a
// check failed. The verdict says which.
var errPlayInvalid = errors.New("play invalid")

// newVerifyPlayCmd is the tresor verify-play command.
func newVerifyPlayCmd() *cobra.Command {
	var file, rootText, seedText, rulesFile, commitments string
	var asJSON bool
	var w witnessFlags
	cmd := &cobra.Command{
		Use:   "verify-play --file play.json",
		Short: "Check one play offline: its unit's proof, scenario, throws, tier and prize",
		Long: "verify-play checks a play as the history API serves it (GET /v1/players/{player}/plays/{play},\n" +
			"or a history page, whose every play is checked) without Tresor's servers: the unit's inclusion\n" +
			"proof against its block's root, the scenario derived from the unit against its tier, the map and\n" +
			"throws shown against that scenario, and the prize against the rules. The root in the document is\n" +
			"the operator's claim: give the root published in BlockOpened with --root to check it\n" +
			"independently; for a closed block, the seed (--seed, or block_seed in the document) rebuilds the\n" +
			"deck. --commitments takes the root, and a closed block's seed, from the commitments the operator\n" +
			"publishes (GET /v1/commitments.ndjson) or a mirror of them, a URL or a file. --vault-key and --cosignatures\n" +
			"check that the regulator's vault cosigned the history holding the play (docs/vault.md).\n" +
			"Exit status: 0 valid, 1 invalid, 2 bad flags or unreadable file. See docs/verify-play.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules, err := loadRules(rulesFile)
			if err != nil {
				return err
			}
			opt := audit.VerifyPlayOptions{Rules: rules}
			if rootText != "" && commitments != "" {
				return usagef("--root and --commitments: give one source of the root")
			}
			if commitments != "" {
				data, err := readCommitments(cmd.Context(), commitments)
				if err != nil {
					return err
				}
				if opt.Commitments, err = audit.ReadCommitments(data); err != nil {
					return usagef("--commitments %s: %v", commitments, err)
				}
				opt.CommitmentsFrom = commitments
			}
			if rootText != "" {
				var root [32]byte
				if len(rootText) != hex.EncodedLen(len(root)) {
					return usagef("--root: want the block's Merkle root as %d hex digits, got %d characters", hex.EncodedLen(len(root)), len(rootText))
				}
				if _, err := hex.Decode(root[:], []byte(rootText)); err != nil {
					return usagef("--root: want the block's Merkle root as 64 hex digits")
				}
				opt.Root = &root
			}
			if seedText != "" {
				seed, err := domain.ParseSeed(seedText)
				if err != nil {
					return usagef("--seed: %v", err)
				}
				opt.Seed = &seed
			}
			witness, err := w.load(cmd.Context())
			if err != nil {
				return err
			}
			data, err := readPlayFile(cmd, file)
			if err != nil {
				return err
			}
			docs, err := audit.ReadPlays(data)
			if err != nil {
				return usagef("%s: %v", file, err)
			}
			out := verifyPlays(docs, opt, witness)
			if asJSON {
				err = writeJSON(cmd.OutOrStdout(), out)
			} else {
				err = printVerdicts(cmd.OutOrStdout(), out.Plays)
			}
			if err != nil {
				return fmt.Errorf("write verdict: %w", err)
			}
			if !out.Valid {
				return errPlayInvalid
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the play as the history API serves it, or a history page (- for stdin)")
	cmd.Flags().StringVar(&rootText, "root", "", "the block's Merkle root as published in BlockOpened (64 hex digits)")
	cmd.Flags().StringVar(&seedText, "seed", "", "the block's seed as revealed by BlockClosed (64 hex digits)")
	cmd.Flags().StringVar(&commitments, "commitments", "", "the published commitments (a URL such as http://127.0.0.1:8080/v1/commitments.ndjson, a mirror of it, or a file): the root and the revealed seed")
	cmd.Flags().StringVar(&w.key, "vault-key", "", "the regulator's vault's Ed25519 public key, as the regulator publishes it: 64 hex digits or a file")
	cmd.Flags().StringVar(&w.from, "cosignatures", "", "the vault's cosignatures (its GET /v1/vault/cosignatures, the operator's mirror of it, or its cosignatures.ndjson), a URL or a file")
	cmd.Flags().StringVar(&rulesFile, "rules", "", "rule set file (default: the embedded rule set in force)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verdict as one JSON object")
	cmd.MarkFlagRequired("file")
	return cmd
}

// playVerdicts is verify-play's answer (--json's object).
type playVerdicts struct {
	Valid bool                `json:"valid"`
	Plays []audit.PlayVerdict `json:"plays"`
}

// verifyPlays checks every play of docs, and its witness when given.
func verifyPlays(docs []projections.PlayView, opt audit.VerifyPlayOptions, witness func(projections.PlayView) audit.PlayCheck) playVerdicts {
	out := playVerdicts{Valid: true}
	for _, doc := range docs {
		v := audit.VerifyPlay(doc, opt)
		if witness != nil {
			seen := witness(doc)
			v.Checks, v.Valid = append(v.Checks, seen), v.Valid && seen.Status != audit.CheckFail
		}
		out.Valid = out.Valid && v.Valid
		out.Plays = append(out.Plays, v)
	}
	return out
}

// readPlayFile reads the play document, at most audit.PlayMaxBytes
// (one more byte, so that ReadPlays refuses an oversized file).
func readPlayFile(cmd *cobra.Command, file string) ([]byte, error) {
	r := cmd.InOrStdin()
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usagef("read play: %v", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, audit.PlayMaxBytes+1))
	if err != nil {
		return nil, usagef("read play %s: %v", file, err)
	}
	return data, nil
}

// printVerdicts writes one block of lines per play: the verdict, where the
// root and seed came from, and each check.
func printVerdicts(out io.Writer, verdicts []audit.PlayVerdict) error {
	w := bufio.NewWriter(out)
	invalid := 0
	for i, v := range verdicts {
		verdict := "VALID"
		if !v.Valid {
			verdict, invalid = "INVALID", invalid+1
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "play %s: %s\n", v.PlayID, verdict)
		switch {
		case v.RootSource == audit.SourceIndependent && v.RootFrom == "--root":
			fmt.Fprintf(w, "  root %s: the published root given with --root (independent)\n", v.Root)
		case v.RootSource == audit.SourceIndependent:
			fmt.Fprintf(w, "  root %s: the root published at %s (independent)\n", v.Root, v.RootFrom)
		case v.RootSource == audit.SourceDocument:
			fmt.Fprintf(w, "  root %s: the document's own claim, NOT checked against an independent value (give --root or --commitments)\n", v.Root)
		default:
			fmt.Fprintln(w, "  root: none")
		}
		switch {
		case v.SeedSource == audit.SourceIndependent && v.SeedFrom == "--seed":
			fmt.Fprintln(w, "  seed: given with --seed (independent)")
		case v.SeedSource == audit.SourceIndependent:
			fmt.Fprintf(w, "  seed: published at %s (independent)\n", v.SeedFrom)
		case v.SeedSource == audit.SourceDocument:
			fmt.Fprintln(w, "  seed: the document's block_seed")
		default:
			fmt.Fprintln(w, "  seed: none (the block is not closed; the deck is not checked)")
		}
		for _, c := range v.Checks {
			fmt.Fprintf(w, "  %-4s  %-15s  %s\n", c.Status, c.Name, c.Detail)
		}
	}
	if len(verdicts) > 1 {
		fmt.Fprintf(w, "\n%d plays: %d valid, %d invalid\n", len(verdicts), len(verdicts)-invalid, invalid)
	}
	return w.Flush()
}

// witnessFlags are verify-play's flags of the vault's witness.
type witnessFlags struct{ key, from string }

// load reads and verifies the cosignatures, and returns the witness check
// of a play (nil without the flags).
func (w witnessFlags) load(ctx context.Context) (func(projections.PlayView) audit.PlayCheck, error) {
	switch {
	case w.key == "" && w.from == "":
		return nil, nil
	case w.key == "" || w.from == "":
		return nil, usagef("--vault-key and --cosignatures: give both, the vault's public key and its cosignatures")
	}
	pub, err := parsePublicKey(w.key)
	if err != nil {
		return nil, usagef("--vault-key: %v", err)
	}
	data, err := readDocument(ctx, "--cosignatures", w.from, vault.CosignaturesMaxBytes)
	if err != nil {
		return nil, err
	}
	cosignatures, err := vault.ReadCosignatures(data, pub)
	if err != nil {
		return nil, fmt.Errorf("--cosignatures %s refused: %w", w.from, err)
	}
	return func(doc projections.PlayView) audit.PlayCheck { return vault.Witness(cosignatures, pub, doc) }, nil
}

// commitmentsFetchTimeout bounds the download of the published commitments.
const commitmentsFetchTimeout = 30 * time.Second

// readCommitments reads the published commitments from a URL (http or
// https) or a file, at most audit.CommitmentsMaxBytes (one more byte, so
// that ReadCommitments refuses an oversized file).
func readCommitments(ctx context.Context, source string) ([]byte, error) {
	return readDocument(ctx, "--commitments", source, audit.CommitmentsMaxBytes)
}

// readDocument reads what flag names, a URL (http or https) or a file, at
// most limit bytes and one more, so that its reader refuses an oversized
// one.
func readDocument(ctx context.Context, flag, source string, limit int64) ([]byte, error) {
	var r io.Reader
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		ctx, cancel := context.WithTimeout(ctx, commitmentsFetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
		if err != nil {
			return nil, usagef("%s: %v", flag, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s %s: %s", flag, source, resp.Status)
		}
		r = resp.Body
	} else {
		f, err := os.Open(source)
		if err != nil {
			return nil, usagef("%s: %v", flag, err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, source, err)
	}
	return data, nil
}
