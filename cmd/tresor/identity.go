package main

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/spf13/cobra"
)

// identityFlags are serve's flags of the operator's identity provider and
// of the token key a rotation replaced.
var identityFlags = []string{"token-issuer", "token-audience", "jwks-url", "token-role-claim", "token-player-claim",
	"token-key-previous-file", "token-key-previous-until"}

// bindIdentityFlags adds serve's identityFlags.
func bindIdentityFlags(cmd *cobra.Command, c *Config) {
	f := cmd.Flags()
	f.StringVar(&c.TokenIssuer, "token-issuer", "", "issuer URL of the operator's OpenID Connect provider whose tokens are accepted besides Tresor's own; none when empty ($TRESOR_TOKEN_ISSUER)")
	f.StringVar(&c.TokenAudience, "token-audience", "", "audience the provider's tokens must name (Tresor's API), required with --token-issuer ($TRESOR_TOKEN_AUDIENCE)")
	f.StringVar(&c.JWKSURL, "jwks-url", "", "URL of the provider's key set (default: read from the issuer's discovery document) ($TRESOR_JWKS_URL)")
	f.StringVar(&c.TokenRoleClaim, "token-role-claim", api.DefaultRoleClaim, "claim of the provider's tokens holding the role ($TRESOR_TOKEN_ROLE_CLAIM)")
	f.StringVar(&c.TokenPlayerClaim, "token-player-claim", api.DefaultPlayerClaim, "claim of the provider's tokens holding a player's id ($TRESOR_TOKEN_PLAYER_CLAIM)")
	f.StringVar(&c.TokenKeyPreviousFile, "token-key-previous-file", "", "token key a rotation replaced: its tokens are accepted until --token-key-previous-until ($TRESOR_TOKEN_KEY_PREVIOUS_FILE)")
	f.StringVar(&c.TokenKeyPreviousUntil, "token-key-previous-until", "", "end of the previous token key's grace, RFC 3339 (2026-12-31T00:00:00Z), at most 720h ahead ($TRESOR_TOKEN_KEY_PREVIOUS_UNTIL)")
	withEnv(f, identityFlags...)
}

// validateIdentity checks the identity flags: an issuer and an audience go
// together, the issuer is https (http only on the loopback, for a
// provider on the same host), and a previous key has the end of its grace.
func (c *Config) validateIdentity() error {
	switch {
	case (c.TokenIssuer == "") != (c.TokenAudience == ""):
		return usagef("--token-issuer %q --token-audience %q: give both or neither", c.TokenIssuer, c.TokenAudience)
	case c.JWKSURL != "" && c.TokenIssuer == "":
		return usagef("--jwks-url: needs --token-issuer and --token-audience")
	case c.TokenRoleClaim == "" || c.TokenPlayerClaim == "":
		return usagef("--token-role-claim %q --token-player-claim %q: name both claims", c.TokenRoleClaim, c.TokenPlayerClaim)
	case (c.TokenKeyPreviousFile == "") != (c.TokenKeyPreviousUntil == ""):
		return usagef("--token-key-previous-file and --token-key-previous-until: give both or neither")
	}
	for flag, u := range map[string]string{"token-issuer": c.TokenIssuer, "jwks-url": c.JWKSURL} {
		if u != "" && !secureURL(u) {
			return usagef("--%s %q: want an https URL (http only on the loopback)", flag, u)
		}
	}
	if c.TokenKeyPreviousUntil != "" {
		if _, err := time.Parse(time.RFC3339, c.TokenKeyPreviousUntil); err != nil {
			return usagef("--token-key-previous-until %q: want an RFC 3339 time such as 2026-12-31T00:00:00Z", c.TokenKeyPreviousUntil)
		}
	}
	return nil
}

// secureURL reports whether u is an https URL, or an http one on the
// loopback, where no network carries it.
func secureURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return false
	}
	ip := net.ParseIP(p.Hostname())
	return p.Scheme == "https" || (p.Scheme == "http" && (p.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())))
}

// provider is the operator's identity provider's verifier, nil without
// --token-issuer; ctx ends its key set's refreshes.
func (c *Config) provider(ctx context.Context, log *slog.Logger) (*api.Provider, error) {
	if c.TokenIssuer == "" {
		return nil, nil
	}
	p, err := api.NewProvider(ctx, api.ProviderConfig{Issuer: c.TokenIssuer, Audience: c.TokenAudience, JWKSURL: c.JWKSURL,
		RoleClaim: c.TokenRoleClaim, PlayerClaim: c.TokenPlayerClaim, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("accepting the tokens of an identity provider", "issuer", c.TokenIssuer, "audience", c.TokenAudience)
	return p, nil
}
