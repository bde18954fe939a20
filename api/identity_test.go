package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/api"
	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/internal/testidp"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// audience is Tresor's API as the provider's tokens name it.
const audience = "tresor-api"

// identityServer is an API accepting the tokens of provider (found by
// discovery) and its own, with the key set fetched again on an unknown
// kid at most once an hour, so that a test sees every fetch.
func identityServer(t *testing.T, provider *testidp.Provider, cfg api.ProviderConfig) (*api.Provider, *api.Tokens, http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg.Issuer, cfg.Audience, cfg.RefreshUnknownKeyMin = provider.Issuer, audience, time.Hour
	verifier, err := api.NewProvider(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens, store := tokensAndStore(t)
	return verifier, tokens, api.NewServer(api.Config{Store: store, Tokens: tokens, Provider: verifier})
}

// tokensAndStore returns Tokens over a fixed key and an empty in-memory
// read model, for a server handled in the test's process.
func tokensAndStore(t *testing.T) (*api.Tokens, *memstore.Store) {
	t.Helper()
	rules, err := domain.DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := api.NewTokens([]byte(strings.Repeat("k", api.TokenKeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return tokens, memstore.New(rules)
}

// status is the status of a GET of path with a bearer token.
func status(t *testing.T, h http.Handler, path, token string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestProviderTokensCarryTheirIdentity: the provider's tokens give the
// role of the role claim, the player of the player claim, the subject of
// sub, and the jti and iat the provider wrote; a player reads only their
// own account; Tresor's own tokens keep working beside them.
func TestProviderTokensCarryTheirIdentity(t *testing.T) {
	provider := testidp.Start(t)
	verifier, tokens, h := identityServer(t, provider, api.ProviderConfig{})
	op := provider.Token(t, testidp.Identity{Subject: "alice@fdj.fr", Role: "operator", Audience: audience})
	c, err := verifier.Verify(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	raw := testidp.Claims(t, op)
	iat, err := raw.GetIssuedAt()
	if err != nil || iat == nil {
		t.Fatalf("the provider's token has no iat: %v", err)
	}
	if c.Role != api.RoleOperator || c.Subject != "alice@fdj.fr" || c.Player != "" || c.ID == "" || c.ID != raw["jti"] ||
		c.IssuedAt == nil || !c.IssuedAt.Equal(iat.Time) {
		t.Errorf("claims %+v, want operator alice@fdj.fr with the token's jti %v and iat %v", c, raw["jti"], iat)
	}
	if got := status(t, h, "/v1/blocks", op); got != http.StatusOK {
		t.Errorf("operator reads the blocks: %d", got)
	}

	player := provider.Token(t, testidp.Identity{Subject: "user-81", Role: "player", Player: "p-1", Audience: audience})
	if got := status(t, h, "/v1/players/p-1/plays", player); got != http.StatusOK {
		t.Errorf("player p-1 reads their plays: %d", got)
	}
	if got := status(t, h, "/v1/players/p-2/plays", player); got != http.StatusForbidden {
		t.Errorf("player p-1 reads p-2's plays: %d, want 403", got)
	}
	if got := status(t, h, "/v1/blocks", player); got != http.StatusForbidden {
		t.Errorf("a player reads the blocks: %d, want 403", got)
	}
	own, err := tokens.MintFor(api.RoleOperator, "bob", "", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := status(t, h, "/v1/blocks", own); got != http.StatusOK {
		t.Errorf("Tresor's own operator token: %d", got)
	}
}

// TestProviderClaimNamesAreSettings: with other claim names, the role and
// player come from those, and a token with the default names only has no
// role.
func TestProviderClaimNamesAreSettings(t *testing.T) {
	provider := testidp.Start(t)
	_, _, h := identityServer(t, provider, api.ProviderConfig{RoleClaim: "tresor_role", PlayerClaim: "tresor_player"})
	named := provider.Token(t, testidp.Identity{Subject: "user-7", Role: "player", Player: "p-7", Audience: audience,
		RoleClaim: "tresor_role", PlayerClaim: "tresor_player"})
	if got := status(t, h, "/v1/players/p-7/plays", named); got != http.StatusOK {
		t.Errorf("player by the configured claims: %d", got)
	}
	plain := provider.Token(t, testidp.Identity{Subject: "user-7", Role: "player", Player: "p-7", Audience: audience})
	if got := status(t, h, "/v1/players/p-7/plays", plain); got != http.StatusUnauthorized {
		t.Errorf("player by the default claims when others are configured: %d, want 401", got)
	}
	// The pages learn who a token is for from the API, never from the
	// claims' names.
	req := httptest.NewRequest(http.MethodGet, "/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+named)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var me struct {
		Role, Player, Subject, Issuer string
		TokenID                       string     `json:"token_id"`
		ExpiresAt                     *time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &me); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/me: %d %s %v", rec.Code, rec.Body, err)
	}
	if me.Role != "player" || me.Player != "p-7" || me.Subject != "user-7" || me.Issuer != provider.Issuer || me.TokenID == "" || me.ExpiresAt == nil {
		t.Errorf("GET /v1/me with the configured claims: %+v", me)
	}
}

// TestProviderTokensRefused: a token for another audience, from another
// provider, expired, unsigned (alg none), an HS256 token signed with the
// provider's public RSA key under its kid (algorithm confusion), one
// without a role, without an issue time, issued in the future or living
// longer than 30 days, and one naming a kid the provider never published
// are all refused, and the made-up kid fetched the key set once.
func TestProviderTokensRefused(t *testing.T) {
	provider := testidp.Start(t)
	other := testidp.Start(t)
	verifier, _, h := identityServer(t, provider, api.ProviderConfig{})
	operator := testidp.Identity{Subject: "alice", Role: "operator", Audience: audience}
	good := provider.Token(t, operator)
	if got := status(t, h, "/v1/blocks", good); got != http.StatusOK {
		t.Fatalf("the provider's good token: %d", got)
	}
	kid, pub := provider.SigningKey()
	claims := testidp.Claims(t, good)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]struct {
		token string
		want  error // what the provider's verifier says, nil for a reason of Tresor's
	}{
		"another audience":             {provider.Token(t, testidp.Identity{Subject: "alice", Role: "operator", Audience: "another-api"}), jwt.ErrTokenInvalidAudience},
		"another issuer":               {other.Token(t, operator), jwt.ErrTokenInvalidIssuer},
		"expired":                      {provider.Token(t, testidp.Identity{Subject: "alice", Role: "operator", Audience: audience, Expired: true}), jwt.ErrTokenExpired},
		"no role":                      {provider.Token(t, testidp.Identity{Subject: "alice", Audience: audience}), nil},
		"alg none":                     {testidp.Forge(t, jwt.SigningMethodNone, kid, claims, jwt.UnsafeAllowNoneSignatureType), jwt.ErrTokenSignatureInvalid},
		"HS256 with the RSA key's kid": {testidp.Forge(t, jwt.SigningMethodHS256, kid, claims, testidp.PublicKeyPEM(t, pub)), jwt.ErrTokenSignatureInvalid},
		"no issue time":                {provider.SignClaims(t, without(claims, "iat")), nil},
		"issued in an hour":            {provider.SignClaims(t, with(claims, "iat", time.Now().Add(time.Hour).Unix())), jwt.ErrTokenUsedBeforeIssued},
		"a life of 31 days":            {provider.SignClaims(t, with(claims, "exp", time.Now().Add(31*24*time.Hour).Unix())), nil},
	}
	if got := status(t, h, "/v1/blocks", provider.SignClaims(t, claims)); got != http.StatusOK {
		t.Fatalf("the good token's claims signed again by the provider: %d", got)
	}
	fetches := provider.KeySetFetches()
	for why, r := range refused {
		if got := status(t, h, "/v1/blocks", r.token); got != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", why, got)
		}
		if _, err := verifier.Verify(context.Background(), r.token); err == nil || (r.want != nil && !errors.Is(err, r.want)) {
			t.Errorf("%s: the provider's verifier says %v, want a refusal (%v)", why, err, r.want)
		}
	}
	if n := provider.KeySetFetches(); n != fetches {
		t.Errorf("%d key set fetches for tokens naming known kids or another issuer, want 0", n-fetches)
	}
	madeUp := testidp.Forge(t, jwt.SigningMethodES256, "made-up", claims, ecKey)
	for range 3 {
		if got := status(t, h, "/v1/blocks", madeUp); got != http.StatusUnauthorized {
			t.Errorf("a made-up kid: %d, want 401", got)
		}
	}
	if n := provider.KeySetFetches(); n != fetches+1 {
		t.Errorf("%d key set fetches for three tokens with an unknown kid, want 1 (spaced)", n-fetches)
	}
}

// TestProviderKeyRotationIsPickedUp: keys the provider rotates to (ES256,
// then EdDSA) verify without a restart, the new kid fetching the key set
// once; a published key verifies from the cache; and a made-up kid right
// after is refused without another fetch.
func TestProviderKeyRotationIsPickedUp(t *testing.T) {
	provider := testidp.Start(t)
	_, _, h := identityServer(t, provider, api.ProviderConfig{})
	operator := testidp.Identity{Subject: "alice", Role: "operator", Audience: audience}
	if got := status(t, h, "/v1/blocks", provider.Token(t, operator)); got != http.StatusOK {
		t.Fatalf("RS256: %d", got)
	}
	fetches := provider.KeySetFetches()
	es := provider.Rotate(t, jose.ES256)
	provider.Rotate(t, jose.EdDSA)
	if got := status(t, h, "/v1/blocks", provider.Token(t, operator)); got != http.StatusOK {
		t.Errorf("EdDSA, a key rotated to: %d", got)
	}
	provider.Use(t, es)
	if got := status(t, h, "/v1/blocks", provider.Token(t, operator)); got != http.StatusOK {
		t.Errorf("ES256, a key published with it: %d", got)
	}
	if n := provider.KeySetFetches(); n != fetches+1 {
		t.Errorf("%d key set fetches for a rotation, want 1", n-fetches)
	}
	claims := testidp.Claims(t, provider.Token(t, operator))
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if got := status(t, h, "/v1/blocks", testidp.Forge(t, jwt.SigningMethodES256, "made-up", claims, ecKey)); got != http.StatusUnauthorized {
		t.Errorf("a made-up kid: %d, want 401", got)
	}
	if n := provider.KeySetFetches(); n != fetches+1 {
		t.Errorf("%d key set fetches after a made-up kid within the spacing, want still 1", n-fetches)
	}
}

// with is a copy of claims with name set to v.
func with(claims jwt.MapClaims, name string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, x := range claims {
		out[k] = x
	}
	out[name] = v
	return out
}

// without is a copy of claims without name.
func without(claims jwt.MapClaims, name string) jwt.MapClaims {
	out := with(claims, name, nil)
	delete(out, name)
	return out
}

// TestAProviderDownAtTheStartIsWaitedFor: a provider that does not answer
// its discovery when the API starts does not stop it: its tokens answer
// 503 with Retry-After (never 401: they may be good), Tresor's own keep
// working, and once the provider answers its tokens verify.
func TestAProviderDownAtTheStartIsWaitedFor(t *testing.T) {
	provider := testidp.Start(t)
	op := provider.Token(t, testidp.Identity{Subject: "alice@fdj.fr", Role: "operator", Audience: audience})
	provider.SetDown(true)
	_, tokens, h := identityServer(t, provider, api.ProviderConfig{DiscoveryRetry: 20 * time.Millisecond})

	req := httptest.NewRequest(http.MethodGet, "/v1/blocks", nil)
	req.Header.Set("Authorization", "Bearer "+op)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"unavailable"`) {
		t.Fatalf("the provider's token while it is down: %d %q %s, want 503 unavailable with Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	own, err := tokens.MintFor(api.RoleOperator, "bob", "", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := status(t, h, "/v1/blocks", own); got != http.StatusOK {
		t.Errorf("Tresor's own token while the provider is down: %d", got)
	}

	provider.SetDown(false)
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got != http.StatusOK && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = status(t, h, "/v1/blocks", op)
	}
	if got != http.StatusOK {
		t.Fatalf("the provider's token once it is back: %d", got)
	}
}

// TestAWrongDiscoveryIsRefusedAtOnce: a discovery document naming another
// issuer is a misconfiguration no wait mends: refused at the start.
func TestAWrongDiscoveryIsRefusedAtOnce(t *testing.T) {
	other := testidp.Start(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + other.Issuer + `","jwks_uri":"` + other.Issuer + `/keys"}`))
	}))
	t.Cleanup(srv.Close)
	_, err := api.NewProvider(t.Context(), api.ProviderConfig{Issuer: srv.URL, Audience: audience})
	if err == nil || !strings.Contains(err.Error(), "names the issuer") {
		t.Fatalf("a discovery naming another issuer: %v, want refused", err)
	}
}
