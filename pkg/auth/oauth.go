package auth

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/errs"
)

// The OAuth2 error codes (RFC 6749 §5.2) the token endpoint sends.
const (
	OAuthInvalidRequest       = "invalid_request"
	OAuthInvalidClient        = "invalid_client"
	OAuthUnauthorizedClient   = "unauthorized_client"
	OAuthUnsupportedGrantType = "unsupported_grant_type"
	OAuthInvalidScope         = "invalid_scope"
	// OAuthServerError is sent with status 500 (RFC 6749 §4.1.2.1), or 503
	// with Retry-After when the key store is briefly unavailable.
	OAuthServerError = "server_error"
	// OAuthTemporarilyUnavailable (RFC 6749 §4.1.2.1) is sent with status
	// 429 and Retry-After: too many failed authentications from the
	// client's address, or too many tokens for the client id.
	OAuthTemporarilyUnavailable = "temporarily_unavailable"
)

// OAuthErrorCodes lists every error code the token endpoint sends.
var OAuthErrorCodes = []string{OAuthInvalidRequest, OAuthInvalidClient, OAuthUnauthorizedClient,
	OAuthUnsupportedGrantType, OAuthInvalidScope, OAuthServerError, OAuthTemporarilyUnavailable}

// TokenResponse is the successful token endpoint response (RFC 6749 §5.1).
type TokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
	Scope       string `json:"scope"`
}

type oauthError struct {
	status int
	code   string
	desc   string
	// reason is, for invalid_client, why the client was refused
	// (ReasonMissing when it sent no credentials).
	reason string
	// retryAfter is the Retry-After of a 429, in seconds.
	retryAfter int
}

func (e *oauthError) Error() string { return e.code + ": " + e.desc }

func oauthErr(status int, code, desc string) *oauthError {
	return &oauthError{status: status, code: code, desc: desc}
}

// invalidClient is the invalid_client error of a client refused for
// reason.
func invalidClient(reason, desc string) *oauthError {
	e := oauthErr(http.StatusUnauthorized, OAuthInvalidClient, desc)
	e.reason = reason
	return e
}

// slowDown is the 429 temporarily_unavailable error, retry after wait.
func slowDown(wait time.Duration, desc string) *oauthError {
	secs := retrySeconds(wait)
	e := oauthErr(http.StatusTooManyRequests, OAuthTemporarilyUnavailable, fmt.Sprintf("%s; retry in %d s", desc, secs))
	e.retryAfter = secs
	return e
}

// maxTokenRequest bounds the token request body.
const maxTokenRequest = 16 << 10

// TokenHandler serves the token endpoint (POST only; the caller routes
// it): the OAuth2 client-credentials grant of RFC 6749 §4.4. The request is
// application/x-www-form-urlencoded with grant_type=client_credentials and
// an optional scope (space-separated subset of the key's scopes); the
// client authenticates with HTTP Basic (client_id = key id, client_secret
// = the whole API key; RFC 6749 §2.3.1) or with the client_id and
// client_secret form fields, never both. The bootstrap key's client_id is
// "bootstrap". client_id may be omitted from the form, since an API key
// names its id. Answers follow RFC 6749 §5.1 and §5.2, not the agentbus
// error body, always with Cache-Control: no-store; when the key store
// cannot be read to check the client's key, server_error with 503 and
// Retry-After (store unavailable) or 500. It is nil unless the method is
// bearer.
//
// Client authentication is throttled per client address like
// Authenticate: a refused client spends one of the address's failure
// budget (none spent for a request without client credentials), and an
// address with none left is answered 429 temporarily_unavailable with
// Retry-After before its credentials are looked at. Tokens are limited
// per client id, counted once the client is authenticated (so nobody
// but the key's holder spends its budget): over the limit, 429
// temporarily_unavailable with Retry-After.
func (g *Guard) TokenHandler() http.Handler {
	if g.tokens == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("Pragma", "no-cache")
		res, err := g.token(r)
		if err != nil {
			var oe *oauthError
			if !errors.As(err, &oe) {
				g.log.Error("token endpoint failed", "err", err)
				oe = oauthErr(http.StatusInternalServerError, OAuthServerError, "the token could not be issued")
				if e := errs.As(err); e.Code == errs.CodeUnavailable {
					oe = oauthErr(http.StatusServiceUnavailable, OAuthServerError, "the key store is briefly unavailable; retry shortly")
					if secs, ok := e.RetryAfter(); ok {
						h.Set("Retry-After", secs)
					}
				}
			}
			switch oe.status {
			case http.StatusUnauthorized:
				h.Set("WWW-Authenticate", `Basic realm="agentbus", charset="UTF-8"`)
			case http.StatusTooManyRequests:
				h.Set("Retry-After", strconv.Itoa(oe.retryAfter))
			}
			writeJSON(w, oe.status, map[string]string{"error": oe.code, "error_description": oe.desc})
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (g *Guard) token(r *http.Request) (*TokenResponse, error) {
	bad := func(desc string) error { return oauthErr(http.StatusBadRequest, OAuthInvalidRequest, desc) }
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, bad("the request must be application/x-www-form-urlencoded")
	}
	if q := r.URL.Query(); q.Has("client_secret") || q.Has("grant_type") {
		return nil, bad("parameters must be sent in the request body, not the URL")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequest+1))
	if err != nil {
		return nil, bad("the request body could not be read")
	}
	if len(body) > maxTokenRequest {
		return nil, bad("the request body is too large")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, bad("the request body is not valid form encoding")
	}
	for k, v := range form {
		if len(v) > 1 {
			return nil, bad("parameter " + k + " appears more than once")
		}
	}
	switch gt := form.Get("grant_type"); gt {
	case "":
		return nil, bad("grant_type is required")
	case "client_credentials":
	default:
		return nil, oauthErr(http.StatusBadRequest, OAuthUnsupportedGrantType, "only grant_type=client_credentials is supported")
	}

	client := g.clientPrefix(r)
	b, wait, ok := g.failures.Attempt(client)
	if !ok {
		return nil, slowDown(wait, "too many failed client authentications from this address")
	}
	p, err := g.client(r, form)
	g.failures.Settle(client, b, clientRefusal(err))
	if err != nil {
		return nil, err
	}
	if g.issued != nil {
		if wait, ok := g.issued.Take(p.ID); !ok {
			return nil, slowDown(wait, "too many token requests for this client")
		}
	}

	scopes := p.Scopes
	if form.Has("scope") {
		asked, err := ParseScopes(form.Get("scope"))
		if err != nil || strings.Contains(form.Get("scope"), ",") {
			return nil, oauthErr(http.StatusBadRequest, OAuthInvalidScope, "scope must be a space-separated list of read, write, admin")
		}
		for _, s := range asked {
			if !p.HasScope(s) {
				return nil, oauthErr(http.StatusBadRequest, OAuthInvalidScope, "the client may not have the "+string(s)+" scope")
			}
		}
		scopes = asked
	}
	if len(scopes) == 0 || len(p.Tenants) == 0 {
		return nil, oauthErr(http.StatusBadRequest, OAuthUnauthorizedClient, "this client may not obtain tokens")
	}
	bkey := ""
	if p.Kind == KindBootstrap {
		bkey = g.bootstrapTag
	}
	tok, _, err := g.tokens.Issue(p.ID, p.Tenants, joinScopes(scopes), bkey)
	if err != nil {
		return nil, err
	}
	return &TokenResponse{AccessToken: tok, TokenType: "Bearer",
		ExpiresIn: int(g.cfg.TokenTTL / time.Second), Scope: joinScopes(scopes)}, nil
}

// client authenticates the client of a token request: exactly one
// method, HTTP Basic or the client_secret form field.
func (g *Guard) client(r *http.Request, form url.Values) (*Principal, error) {
	id, secret := form.Get("client_id"), form.Get("client_secret")
	basicID, basicSecret, hasBasic, err := basicAuth(r)
	if err != nil {
		return nil, invalidClient(ReasonMalformed, err.Error())
	}
	switch {
	case hasBasic && form.Has("client_secret"):
		return nil, oauthErr(http.StatusBadRequest, OAuthInvalidRequest, "use one client authentication method: HTTP Basic or client_secret, not both")
	case hasBasic:
		if form.Has("client_id") && form.Get("client_id") != basicID {
			return nil, oauthErr(http.StatusBadRequest, OAuthInvalidRequest, "client_id does not match the HTTP Basic user")
		}
		id, secret = basicID, basicSecret
	case secret == "":
		return nil, invalidClient(ReasonMissing, "client authentication is required (HTTP Basic, or client_id and client_secret)")
	}
	return g.authenticateClient(r, id, secret)
}

// clientRefusal returns why the client of a token request was refused
// (invalid_client), or "" when it was not: the request failed otherwise
// or did not fail. A client that sent no credentials is not refused:
// nothing was guessed.
func clientRefusal(err error) string {
	var oe *oauthError
	if !errors.As(err, &oe) || oe.status != http.StatusUnauthorized || oe.reason == ReasonMissing {
		return ""
	}
	return cmp.Or(oe.reason, ReasonInvalid)
}

// basicAuth reads HTTP Basic credentials, form-decoding both parts as
// RFC 6749 §2.3.1 says.
func basicAuth(r *http.Request) (id, secret string, ok bool, err error) {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		return "", "", false, nil
	}
	if len(vals) > 1 {
		return "", "", false, errors.New("the Authorization header appears more than once")
	}
	u, p, ok := r.BasicAuth()
	if !ok {
		return "", "", false, errors.New("the Authorization header must use the Basic scheme")
	}
	if u, err = url.QueryUnescape(u); err != nil {
		return "", "", false, errors.New("the client id is not form-encoded")
	}
	if p, err = url.QueryUnescape(p); err != nil {
		return "", "", false, errors.New("the client secret is not form-encoded")
	}
	return u, p, true, nil
}

// authenticateClient checks client credentials: an API key (client_id
// its id, or empty) or the bootstrap key (client_id "bootstrap" or
// empty). Tokens are not client credentials. A key store failure is
// returned as it is, not as an *oauthError.
func (g *Guard) authenticateClient(r *http.Request, id, secret string) (*Principal, error) {
	invalid := invalidClient(ReasonInvalid, "client authentication failed")
	if secret == "" || len(secret) > maxCredentialLen || !printable(secret) {
		return nil, invalidClient(ReasonMalformed, "client authentication failed")
	}
	if g.isBootstrap(secret) {
		if id != "" && id != BootstrapID {
			return nil, invalid
		}
		return g.bootstrapPrincipal(), nil
	}
	keyID, ok := KeyIDOf(secret)
	if !ok || (id != "" && id != keyID) {
		return nil, invalid
	}
	p, err := g.keys.Verify(r.Context(), secret)
	if err != nil {
		if errs.CodeOf(err) != errs.CodeUnauthenticated {
			return nil, err // the key store could not be read
		}
		switch ReasonOf(err) {
		case ReasonRevoked:
			return nil, invalidClient(ReasonRevoked, "the client's key was revoked")
		case ReasonExpired:
			return nil, invalidClient(ReasonExpired, "the client's key expired")
		}
		return nil, invalid
	}
	return p, nil
}

// ManifestBlock returns the discovery manifest's authentication block, or
// nil for method none (no credentials needed, so no block: the spec reads
// a declared block as "credentials required").
func (g *Guard) ManifestBlock() map[string]any {
	switch g.cfg.Method {
	case MethodBearer:
		return map[string]any{"type": "bearer", "in": "header", "scheme": "Bearer", "header": "Authorization",
			"tokenUrl": g.cfg.Endpoint + TokenPath, "grantTypes": []string{"client_credentials"},
			"scopes": AllScopes, "tokenTTLSeconds": int(g.cfg.TokenTTL / time.Second)}
	case MethodAPIKeyHeader, MethodAPIKeyQuery:
		return map[string]any{"type": "apiKey", "in": g.cfg.Method.in(), "scheme": g.cfg.Scheme, "scopes": AllScopes}
	}
	return nil
}

// ScopeDescriptions describes each scope (OpenAPI oauth2 flows).
var ScopeDescriptions = map[string]string{
	string(ScopeRead):  "read events, catalogues, registries and traces",
	string(ScopeWrite): "submit commands; manage agents and services",
	string(ScopeAdmin): "inject synthetic events (POST /events), when the operator allows it",
}

// SecuritySchemes returns the OpenAPI components.securitySchemes matching
// the configured method, and the security requirement of an operation
// needing scope (nil for method none).
func (g *Guard) SecuritySchemes() (schemes map[string]any, requirement func(scope string) []map[string][]string) {
	switch g.cfg.Method {
	case MethodBearer:
		schemes = map[string]any{
			"bearerAuth": map[string]any{"type": "http", "scheme": "bearer",
				"description": "An access token from tokenUrl, or an API key (ab_<id>_<secret>)."},
			"oauth2": map[string]any{"type": "oauth2", "flows": map[string]any{
				"clientCredentials": map[string]any{"tokenUrl": g.cfg.Endpoint + TokenPath, "scopes": ScopeDescriptions}}},
		}
		return schemes, func(scope string) []map[string][]string {
			return []map[string][]string{{"bearerAuth": {}}, {"oauth2": {scope}}}
		}
	case MethodAPIKeyHeader, MethodAPIKeyQuery:
		schemes = map[string]any{"apiKey": map[string]any{"type": "apiKey", "in": g.cfg.Method.in(), "name": g.cfg.Scheme,
			"description": "An API key (ab_<id>_<secret>) from `agentbus keys create`."}}
		return schemes, func(string) []map[string][]string { return []map[string][]string{{"apiKey": {}}} }
	}
	return nil, nil
}
