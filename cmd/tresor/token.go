package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/spf13/cobra"
)

// newTokenCmd is the tresor token command.
func newTokenCmd() *cobra.Command {
	var (
		cfg     Config
		role    string
		player  string
		subject string
		ttl     time.Duration
		base    string
	)
	cmd := &cobra.Command{
		Use:   "token --role ROLE [--player ID | --subject WHO] [--ttl 1h] [--url BASE]",
		Short: "Mint an API bearer token signed with the server's token key",
		Long: "token mints a bearer token with the key of the server (<data>/keys/token.key, or --token-key-file).\n" +
			"It never creates that key: tresor serve makes it on its first embedded start, and a token signed\n" +
			"with any other key would be refused. Every token names its subject, whom it is for: a player's is\n" +
			"the player id (--player); an operator's, finance's or regulator's is --subject (a login such as\n" +
			"alice@fdj.fr; by default the login of who runs tresor token), which every command given with the\n" +
			"token records. With --url it prints a link to the pages of the server at BASE (the player's screen,\n" +
			"or the console) carrying the token in the URL fragment, which the browser never sends to a server,\n" +
			"so that it stays out of every log.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Data == "" && cfg.TokenKeyFile == "" {
				return usagef("--data: empty data directory")
			}
			tokens, err := cfg.tokens(false)
			if err != nil {
				return err
			}
			if api.Role(role) != api.RolePlayer && subject == "" {
				if subject, err = loginSubject(); err != nil {
					return err
				}
			}
			tok, err := tokens.MintFor(api.Role(role), subject, player, ttl, time.Now())
			if err != nil {
				return usagef("%v", err)
			}
			if base != "" {
				if tok, err = pageLink(base, api.Role(role), tok); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	bindDataFlag(cmd, &cfg)
	bindTokenFlag(cmd, &cfg)
	cmd.Flags().StringVar(&role, "role", "", "player, operator, finance or regulator")
	cmd.Flags().StringVar(&player, "player", "", "the player id of a player token (its subject)")
	cmd.Flags().StringVar(&subject, "subject", "", "whom the token is for, recorded by every command it gives (default: the login running tresor token; a player token's is its player id)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid (at most 720h)")
	cmd.Flags().StringVar(&base, "url", "", "print a link to the server's pages at this base URL (http://127.0.0.1:8080) with the token in its fragment")
	return cmd
}

// loginSubject is the default subject of a token of the operator's staff:
// the login of whoever mints it, so that every token names someone.
func loginSubject() (string, error) {
	u, err := user.Current()
	if err != nil || !domain.ValidSubject(u.Username) {
		return "", usagef("--subject: required (the login running tresor token cannot name the token's subject)")
	}
	return u.Username, nil
}

// pageLink is the link to the page of a role (a player's screen, the
// console for the others) at base, with the token in the fragment.
func pageLink(base string, role api.Role, token string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" {
		return "", usagef("--url %q: want the server's base URL, such as http://127.0.0.1:8080", base)
	}
	page := "/console"
	if role == api.RolePlayer {
		page = "/play"
	}
	return strings.TrimSuffix(u.String(), "/") + page + "#token=" + token, nil
}

// bindTokenFlag adds the flag of the key that signs API tokens.
func bindTokenFlag(cmd *cobra.Command, c *Config) {
	cmd.Flags().StringVar(&c.TokenKeyFile, "token-key-file", "", "32-byte HMAC key signing API tokens (default <data>/keys/token.key) ($TRESOR_TOKEN_KEY_FILE)")
	withEnv(cmd.Flags(), "token-key-file")
}

// tokens loads the token key, and the key it replaced when serve was given
// one. Only serve creates the key (create), on the embedded default's
// first start, as the other keys: a key made anywhere else would sign
// tokens the server refuses. After a rotation, serve creates the new key
// where the old one was moved from, and tresor token mints with it.
func (c *Config) tokens(create bool) (*api.Tokens, error) {
	path := c.TokenKeyFile
	if path == "" {
		path = filepath.Join(c.Data, "keys", "token.key")
	}
	key, err := loadOrCreateKey(path, api.TokenKeySize, create)
	if errors.Is(err, os.ErrNotExist) && !create {
		return nil, usagef("no token key at %s: give the --data of the server (or --token-key-file); tresor serve creates the key on its first start", path)
	}
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	tokens, err := api.NewTokens(key)
	if err != nil || c.TokenKeyPreviousFile == "" {
		return tokens, err
	}
	previous, err := loadOrCreateKey(c.TokenKeyPreviousFile, api.TokenKeySize, false)
	if err != nil {
		return nil, fmt.Errorf("previous token key: %w", err)
	}
	until, err := time.Parse(time.RFC3339, c.TokenKeyPreviousUntil)
	if err != nil {
		return nil, usagef("--token-key-previous-until %q: want an RFC 3339 time", c.TokenKeyPreviousUntil)
	}
	if tokens, err = tokens.WithPrevious(previous, until); err != nil {
		return nil, usagef("--token-key-previous-file: %v", err)
	}
	return tokens, nil
}
