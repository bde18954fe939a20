// Package testidp runs a real OpenID Connect provider for the tests:
// zitadel/oidc's example provider, on a local port, configured as an
// operator would configure theirs for Tresor. Each identity a test needs
// is a client of the provider; the client-credentials grant gives it a JWT
// access token for Tresor's audience carrying the role and player claims,
// signed by the provider's current key, which a test can rotate.
package testidp

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	exstorage "github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Provider is a running provider.
type Provider struct {
	// Issuer is the provider's issuer URL.
	Issuer string
	store  *storage
	// keySetFetches counts the requests for the key set.
	keySetFetches atomic.Int64
	// down makes every request answer 503, as a provider in an outage.
	down atomic.Bool
}

// Identity is a client of the provider and what its tokens say.
type Identity struct {
	// Subject is the token's sub; Role and Player its role and player
	// claims under the names RoleClaim and PlayerClaim ("role", "player"
	// when empty), left out when empty.
	Subject, Role, Player  string
	RoleClaim, PlayerClaim string
	// Audience is the token's aud.
	Audience string
	// Expired makes the provider issue it already expired.
	Expired bool
}

// Start runs a provider signing with an RS256 key until the test ends.
func Start(tb testing.TB) *Provider {
	tb.Helper()
	p := &Provider{}
	var handler atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			http.Error(w, "provider down", http.StatusServiceUnavailable)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/keys") {
			p.keySetFetches.Add(1)
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	tb.Cleanup(srv.Close)
	p.Issuer = srv.URL
	p.store = &storage{Storage: exstorage.NewStorage(exstorage.NewUserStore(srv.URL)), clients: map[string]*client{}}
	p.Rotate(tb, jose.RS256)
	h := http.Handler(exampleop.SetupServer(srv.URL, p.store, nil, false))
	handler.Store(&h)
	return p
}

// SetDown puts the provider in an outage (every request answers 503), or
// ends it.
func (p *Provider) SetDown(down bool) { p.down.Store(down) }

// KeySetFetches is how many times the key set was asked for.
func (p *Provider) KeySetFetches() int64 { return p.keySetFetches.Load() }

// Rotate makes a new key of alg (RS256, ES256 or EdDSA) the signing key,
// publishing it beside the keys already published, and returns its kid.
func (p *Provider) Rotate(tb testing.TB, alg jose.SignatureAlgorithm) string {
	tb.Helper()
	k, err := newKey(alg)
	if err != nil {
		tb.Fatal(err)
	}
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.signing = k
	p.store.published = append(p.store.published, k)
	return k.id
}

// Use makes the published key kid the signing key again.
func (p *Provider) Use(tb testing.TB, kid string) {
	tb.Helper()
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	for _, k := range p.store.published {
		if k.id == kid {
			p.store.signing = k
			return
		}
	}
	tb.Fatalf("no published key %s", kid)
}

// SigningKey is the current signing key's kid and public key.
func (p *Provider) SigningKey() (string, crypto.PublicKey) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	return p.store.signing.id, p.store.signing.public
}

// SignClaims signs claims with the provider's current key under its kid,
// as a provider configured to issue such tokens would.
func (p *Provider) SignClaims(tb testing.TB, claims jwt.MapClaims) string {
	tb.Helper()
	p.store.mu.Lock()
	k := p.store.signing
	p.store.mu.Unlock()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(string(k.alg)), claims)
	tok.Header["kid"] = k.id
	s, err := tok.SignedString(k.private)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Forge signs claims as an attacker would, with method and key, naming
// kid.
func Forge(tb testing.TB, method jwt.SigningMethod, kid string, claims jwt.MapClaims, key any) string {
	tb.Helper()
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Claims decodes a token's claims, unverified.
func Claims(tb testing.TB, token string) jwt.MapClaims {
	tb.Helper()
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil {
		tb.Fatal(err)
	}
	return claims
}

// PublicKeyPEM is a public key in PEM, as anyone may read it.
func PublicKeyPEM(tb testing.TB, pub crypto.PublicKey) []byte {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Token registers id as a client of the provider and returns the access
// token the provider gives it (client-credentials grant).
func (p *Provider) Token(tb testing.TB, id Identity) string {
	tb.Helper()
	c := &client{id: "client-" + uuid.NewString(), secret: uuid.NewString(), identity: id}
	p.store.mu.Lock()
	p.store.clients[c.id] = c
	p.store.mu.Unlock()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"tresor"}}
	req, err := http.NewRequest(http.MethodPost, p.Issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(c.id, c.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.AccessToken == "" {
		tb.Fatalf("token from the provider: %s %v %s %s", resp.Status, err, body.Error, body.Description)
	}
	return body.AccessToken
}

// storage is the example provider's storage with Tresor's clients, their
// claims and rotating keys.
type storage struct {
	*exstorage.Storage
	mu        sync.Mutex
	clients   map[string]*client
	signing   *key
	published []*key
}

func (s *storage) client(id string) (*client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok {
		return nil, errors.New("no such client")
	}
	return c, nil
}

func (s *storage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	c, err := s.client(id)
	if err != nil || c.secret != secret {
		return nil, errors.New("wrong client or secret")
	}
	return c, nil
}

func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, err := s.client(id)
	if err != nil {
		return nil, err
	}
	return tokenRequest{&oidc.JWTTokenRequest{Subject: c.identity.Subject, Audience: []string{c.identity.Audience}, Scopes: scopes}, c.identity.Expired}, nil
}

// GetPrivateClaimsFromScopes gives a client's token its role and player.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, _, clientID string, _ []string) (map[string]any, error) {
	c, err := s.client(clientID)
	if err != nil {
		return nil, err
	}
	claims := map[string]any{}
	if c.identity.Role != "" {
		claims[cmp.Or(c.identity.RoleClaim, "role")] = c.identity.Role
	}
	if c.identity.Player != "" {
		claims[cmp.Or(c.identity.PlayerClaim, "player")] = c.identity.Player
	}
	return claims, nil
}

// tokenRequest is a client's request, which may ask for an expired token.
type tokenRequest struct {
	*oidc.JWTTokenRequest
	expired bool
}

// CreateAccessToken issues the token expired ten minutes ago when its
// client asks for an expired one.
func (s *storage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if r, ok := req.(tokenRequest); ok && r.expired {
		exp = time.Now().Add(-10 * time.Minute)
	}
	return id, exp, err
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signing, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var algs []jose.SignatureAlgorithm
	for _, k := range s.published {
		algs = append(algs, k.alg)
	}
	return algs, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.published))
	for i, k := range s.published {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

// key is a signing key of the provider (op.SigningKey).
type key struct {
	id      string
	alg     jose.SignatureAlgorithm
	private crypto.Signer
	public  crypto.PublicKey
}

func newKey(alg jose.SignatureAlgorithm) (*key, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, fmt.Errorf("no key for %s", alg)
	}
	if err != nil {
		return nil, err
	}
	return &key{id: uuid.NewString(), alg: alg, private: priv, public: priv.Public()}, nil
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *key) Key() any                                    { return k.private }
func (k *key) ID() string                                  { return k.id }

// publicKey is a published key (op.Key).
type publicKey struct{ k *key }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return p.k.alg }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return p.k.public }

// client is a client of the provider (op.Client) with JWT access tokens.
type client struct {
	id, secret string
	identity   Identity
}

func (c *client) GetID() string                        { return c.id }
func (c *client) RedirectURIs() []string               { return nil }
func (c *client) PostLogoutRedirectURIs() []string     { return nil }
func (c *client) ApplicationType() op.ApplicationType  { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod          { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType   { return nil }
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
