package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/spf13/cobra"
)

func init() {
	var (
		cfg     Config
		role    string
		player  string
		subject string
		ttl     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --role ROLE (--player ID | --subject WHO) [--ttl 1h]",
		Short: "Mint an API bearer token signed with the server's token key",
		Long: "token mints a bearer token. Every token names its subject, whom it is for: a player's is the player id\n" +
			"(--player); an operator's, finance's or regulator's is --subject (a login such as alice@fdj.fr), which every\n" +
			"command given with the token records.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			if !api.ValidRole(api.Role(role)) {
				return usagef("--role %q: want player, operator, finance or regulator", role)
			}
			if api.Role(role) != api.RolePlayer && subject == "" {
				return usagef("--subject: required for a %s token (who it is for: every command it gives records it)", role)
			}
			tokens, err := cfg.tokens()
			if err != nil {
				return err
			}
			tok, err := tokens.MintFor(api.Role(role), subject, player, ttl, time.Now())
			if err != nil {
				return usagef("%v", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	bindStoreFlags(cmd, &cfg)
	bindTokenFlag(cmd, &cfg)
	cmd.Flags().StringVar(&role, "role", "", "player, operator, finance or regulator")
	cmd.Flags().StringVar(&player, "player", "", "the player id of a player token (its subject)")
	cmd.Flags().StringVar(&subject, "subject", "", "whom the token is for (required but for a player token, whose subject is its player id)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid (at most 720h)")
	rootCmd.AddCommand(cmd)
}

// bindTokenFlag adds the flag of the key that signs API tokens.
func bindTokenFlag(cmd *cobra.Command, c *Config) {
	cmd.Flags().StringVar(&c.TokenKeyFile, "token-key-file", envOr("token-key-file", ""), "32-byte HMAC key signing API tokens (default <data>/keys/token.key) ($TRESOR_TOKEN_KEY_FILE)")
}

// tokens loads the token key, created on first use by the embedded
// default, as the other keys.
func (c *Config) tokens() (*api.Tokens, error) {
	path := c.TokenKeyFile
	if path == "" {
		path = filepath.Join(c.Data, "keys", "token.key")
	}
	key, err := loadOrCreateKey(path, api.TokenKeySize, c.NATSURL == "")
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return api.NewTokens(key)
}
