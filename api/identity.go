package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/fdj/tresor/domain"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// The identity provider's tokens are signed with asymmetric keys only: a
// shared secret would let whoever holds it, the provider's every client,
// sign a Tresor token.
var providerAlgorithms = []string{"EdDSA", "ES256", "RS256"}

// Defaults of an identity provider's configuration.
const (
	DefaultRoleClaim   = "role"
	DefaultPlayerClaim = "player"
	// RefreshUnknownKeyMin spaces the key set's fetches on an unknown kid:
	// a rotation is picked up at once, and tokens with made-up kids cost
	// the provider one fetch in this time per node.
	RefreshUnknownKeyMin = 30 * time.Second
	// refreshKeysEvery fetches the key set even when no kid is unknown,
	// so a key the provider withdrew stops verifying.
	refreshKeysEvery = 15 * time.Minute
	// providerTimeout bounds one request to the provider.
	providerTimeout = 10 * time.Second
	// tokenLeeway is the clock difference tolerated with the provider.
	tokenLeeway = 30 * time.Second
	// discoveryBytesMax bounds the provider's discovery document.
	discoveryBytesMax = 1 << 20
	// DiscoveryRetry spaces the discovery's tries while the provider does
	// not answer it.
	DiscoveryRetry = 5 * time.Second
)

// errProviderUnreachable: the provider's discovery document has not been
// read yet (the provider down since Tresor started); its tokens cannot be
// checked, and the API answers 503 until they can.
var errProviderUnreachable = errors.New("identity provider not reached yet: its tokens cannot be checked")

// errDiscoveryRefused marks a discovery document that was read and is
// wrong: a misconfiguration no retry mends.
var errDiscoveryRefused = errors.New("refused")

// ProviderConfig says whose tokens the API accepts besides its own: an
// OpenID Connect provider's.
type ProviderConfig struct {
	// Issuer is the provider's issuer URL, its tokens' iss.
	Issuer string
	// Audience is what the tokens' aud must contain: Tresor's API.
	Audience string
	// JWKSURL is where the provider's key set is; empty reads it from the
	// provider's discovery document.
	JWKSURL string
	// RoleClaim and PlayerClaim name the claims of the role and of the
	// player id (DefaultRoleClaim, DefaultPlayerClaim when empty).
	RoleClaim, PlayerClaim string
	// RefreshUnknownKeyMin spaces the key set's fetches on an unknown kid
	// (RefreshUnknownKeyMin when zero).
	RefreshUnknownKeyMin time.Duration
	// DiscoveryRetry spaces the discovery's tries while the provider does
	// not answer it (DiscoveryRetry when zero).
	DiscoveryRetry time.Duration
	// Client makes the requests to the provider (one with providerTimeout
	// when nil).
	Client *http.Client
	// Logger receives the key set's failed refreshes.
	Logger *slog.Logger
}

// Provider verifies the tokens of an OpenID Connect provider: signed by a
// key of its key set named by kid, fetched at the start, every
// refreshKeysEvery and on an unknown kid, spaced.
type Provider struct {
	cfg ProviderConfig
	// keys is nil until the key set's URL is known: given, or discovered.
	keys   atomic.Pointer[keyfunc.Keyfunc]
	parser *jwt.Parser
}

// NewProvider reads the provider's key set (discovering where it is when
// cfg names none); ctx ends its refreshes. A provider that does not answer
// its discovery is tried again every cfg.DiscoveryRetry, its tokens
// answered 503 meanwhile: the ledger does not stay down with it, and
// Tresor's own tokens work. A discovery document that is wrong (another
// issuer, no key set URL) is a misconfiguration, refused at once.
func NewProvider(ctx context.Context, cfg ProviderConfig) (*Provider, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("identity provider: an issuer and an audience are both needed")
	}
	cfg.RoleClaim = cmp.Or(cfg.RoleClaim, DefaultRoleClaim)
	cfg.PlayerClaim = cmp.Or(cfg.PlayerClaim, DefaultPlayerClaim)
	cfg.RefreshUnknownKeyMin = cmp.Or(cfg.RefreshUnknownKeyMin, RefreshUnknownKeyMin)
	cfg.DiscoveryRetry = cmp.Or(cfg.DiscoveryRetry, DiscoveryRetry)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: providerTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Provider{cfg: cfg, parser: jwt.NewParser(jwt.WithValidMethods(providerAlgorithms), jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(tokenLeeway))}
	if cfg.JWKSURL != "" {
		return p, p.useKeySet(ctx, cfg.JWKSURL)
	}
	u, err := discoverKeySet(ctx, cfg.Client, cfg.Issuer)
	switch {
	case errors.Is(err, errDiscoveryRefused):
		return nil, err
	case err != nil:
		cfg.Logger.Warn("identity provider: discovery failed; its tokens are answered 503 until it succeeds",
			"issuer", cfg.Issuer, "retry_every", cfg.DiscoveryRetry, "err", err)
		go p.discoverLater(ctx)
		return p, nil
	}
	return p, p.useKeySet(ctx, u)
}

// discoverLater tries the discovery until it succeeds or ctx ends.
func (p *Provider) discoverLater(ctx context.Context) {
	t := time.NewTicker(p.cfg.DiscoveryRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u, err := discoverKeySet(ctx, p.cfg.Client, p.cfg.Issuer)
		if err == nil {
			err = p.useKeySet(ctx, u)
		}
		if err == nil {
			p.cfg.Logger.Info("identity provider: discovered; accepting its tokens", "issuer", p.cfg.Issuer, "jwks_uri", u)
			return
		}
		p.cfg.Logger.Warn("identity provider: discovery failed again", "issuer", p.cfg.Issuer, "err", err)
	}
}

// useKeySet starts fetching the key set at u, and verifying with it.
func (p *Provider) useKeySet(ctx context.Context, u string) error {
	cfg := p.cfg
	keys, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{u}, keyfunc.Override{
		Client: cfg.Client, HTTPTimeout: providerTimeout, RefreshInterval: refreshKeysEvery,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.RefreshUnknownKeyMin), 1),
		// An unknown kid waits for a fetch only briefly: a request is not
		// held for long, and tokens with made-up kids pile up no waiters.
		RateLimitWaitMax: time.Second,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				cfg.Logger.WarnContext(ctx, "identity provider: key set not refreshed", "url", u, "err", err)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("identity provider: key set %s: %w", u, err)
	}
	p.keys.Store(&keys)
	return nil
}

// discoverKeySet reads the provider's discovery document for its key
// set's URL. The document must name the issuer it was asked of, as OpenID
// Connect Discovery requires, so that a provider cannot speak for another.
func discoverKeySet(ctx context.Context, client *http.Client, issuer string) (string, error) {
	where := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return "", fmt.Errorf("identity provider: issuer %q: %w", issuer, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("identity provider: discovery: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("identity provider: discovery %s: %s", where, resp.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, discoveryBytesMax)).Decode(&doc); err != nil {
		return "", fmt.Errorf("identity provider: discovery %s: %w", where, err)
	}
	if doc.Issuer != issuer {
		return "", fmt.Errorf("identity provider: discovery %s names the issuer %q, not %q: %w", where, doc.Issuer, issuer, errDiscoveryRefused)
	}
	if u, err := url.Parse(doc.JWKSURI); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("identity provider: discovery %s: jwks_uri %q is not an http(s) URL: %w", where, doc.JWKSURI, errDiscoveryRefused)
	}
	return doc.JWKSURI, nil
}

// Verify checks a token of the provider: its signature by the key its kid
// names, algorithm, issuer, audience, issue time and expiry, and that its
// claims name a role (and a player id for a player) and a subject. The registered
// claims (jti, iat, sub) are kept as the provider wrote them.
func (p *Provider) Verify(ctx context.Context, raw string) (*Claims, error) {
	keys := p.keys.Load()
	if keys == nil {
		return nil, errProviderUnreachable
	}
	claims := jwt.MapClaims{}
	keyOf := (*keys).KeyfuncCtx(ctx)
	_, err := p.parser.ParseWithClaims(raw, claims, func(tok *jwt.Token) (any, error) {
		// Another issuer's token is refused before its kid is looked up,
		// so that it never makes the key set be fetched.
		if iss, _ := claims.GetIssuer(); iss != p.cfg.Issuer {
			return nil, jwt.ErrTokenInvalidIssuer
		}
		if _, ok := tok.Header["kid"].(string); !ok {
			return nil, errNoKeyID
		}
		return keyOf(tok)
	})
	if err != nil {
		return nil, fmt.Errorf("verify token: %w", err)
	}
	return p.claims(claims)
}

// claims maps a verified token's claims to Tresor's.
func (p *Provider) claims(m jwt.MapClaims) (*Claims, error) {
	role, ok := m[p.cfg.RoleClaim].(string)
	if !ok {
		return nil, errNoRole
	}
	player, _ := m[p.cfg.PlayerClaim].(string)
	c := &Claims{Role: Role(role), Player: player}
	b, err := json.Marshal(m)
	if err == nil {
		err = json.Unmarshal(b, &c.RegisteredClaims)
	}
	if err != nil {
		return nil, fmt.Errorf("verify token: registered claims: %w", err)
	}
	if !ValidRole(c.Role) || (c.Role == RolePlayer) != (player != "") || (player != "" && !domain.ValidID(player)) {
		return nil, errRoleAndPlayer
	}
	if !domain.ValidSubject(c.Subject) {
		return nil, errBadSubject
	}
	// A revocation of a subject covers its tokens issued before it, so a
	// token must say when it was issued; and it lives no longer than one
	// of Tresor's own, so that a leaked one expires.
	if c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > TokenTTLMax {
		return nil, errLifetime
	}
	return c, nil
}

// verifyToken checks a bearer token with the verifier of its algorithm:
// HS256 with Tresor's own token keys, any other with the identity
// provider's key set, which takes only its asymmetric algorithms. A token
// cannot choose a weaker check: an HS256 token naming a provider's kid
// finds no such key among Tresor's, and an HS256 token is never verified
// with a provider's public key.
func (s *Server) verifyToken(ctx context.Context, raw string) (*Claims, error) {
	if s.cfg.Provider == nil {
		return s.cfg.Tokens.Verify(raw)
	}
	tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	if err != nil {
		return nil, fmt.Errorf("verify token: %w", err)
	}
	if tok.Method == jwt.SigningMethodHS256 {
		return s.cfg.Tokens.Verify(raw)
	}
	return s.cfg.Provider.Verify(ctx, raw)
}

// meJSON is who a token is for, as the API verified it. Its JSON keys are
// a contract: add, never rename.
type meJSON struct {
	Role      Role       `json:"role"`
	Player    string     `json:"player,omitempty"`
	Subject   string     `json:"subject,omitempty"`
	Issuer    string     `json:"issuer,omitempty"`
	TokenID   string     `json:"token_id,omitempty"`
	IssuedAt  *time.Time `json:"issued_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// me answers who the request's token is for. The pages shape themselves
// by it rather than by reading the token: a provider's claims may have
// other names, and a revoked token is refused here before a page shows
// anything.
func (s *Server) me(_ *http.Request, c *Claims) (int, any, error) {
	m := meJSON{Role: c.Role, Player: c.Player, Subject: c.Subject, Issuer: c.Issuer, TokenID: c.ID}
	if c.IssuedAt != nil {
		m.IssuedAt = &c.IssuedAt.Time
	}
	if c.ExpiresAt != nil {
		m.ExpiresAt = &c.ExpiresAt.Time
	}
	return http.StatusOK, m, nil
}
