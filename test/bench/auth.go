package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/settings"
)

// The authentication stage measures what authentication costs on ingest:
// POST /commands on a fresh agentbus without authentication, with an API
// key in a header (SHA-256 of the key, cached record, constant-time
// compare), and with a bearer token from the token endpoint (HS256 JWT
// verification plus the key's revocation check). The rate limit is off so
// that only authentication is measured. Runs alternate, rounds times.

// authRun is one authentication setting of the stage.
type authRun struct {
	label string
	typ   string // auth.type
	// credential returns the header to send, once agentbus is up.
	credential func(ab *abServer) (string, string, error)
}

var authRuns = []authRun{
	{label: "auth none", typ: "none", credential: func(*abServer) (string, string, error) { return "", "", nil }},
	{label: "auth apikey-header", typ: "apikey-header", credential: func(ab *abServer) (string, string, error) {
		key, _, err := benchKey(ab)
		return auth.DefaultHeaderScheme, key, err
	}},
	{label: "auth bearer (token)", typ: "bearer", credential: func(ab *abServer) (string, string, error) {
		key, id, err := benchKey(ab)
		if err != nil {
			return "", "", err
		}
		tok, err := benchToken(ab.URL, id, key)
		return "Authorization", "Bearer " + tok, err
	}},
}

// authStage runs the stage and adds its figures to rep, posting the bodies
// of src.
func authStage(o options, src *bodies, rep *report) error {
	fmt.Printf("A. Authentication on ingest: POST /commands, %d connections, %s warm-up + %s measured per run, rate limit off\n",
		o.conns, o.warmup, o.dur)
	byLabel := map[string][]loadResult{}
	var all []loadResult
	for round := 1; round <= o.rounds; round++ {
		for _, ar := range authRuns {
			runtime.GC()
			waitQuiet()
			r, err := authIngest(o, src, ar, fmt.Sprintf("%s #%d", ar.label, round))
			if err != nil {
				return err
			}
			byLabel[ar.label] = append(byLabel[ar.label], r)
			all = append(all, r)
			fmt.Printf("   %-24s %8.0f req/s  p50 %.2f ms  p99 %.2f ms\n", r.Label, r.RPS, ms(r.P50), ms(r.P99))
		}
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	ingestHeader(tw)
	for _, r := range all {
		ingestLine(tw, r)
	}
	tw.Flush()
	base := median(byLabel["auth none"])
	fmt.Printf("\n   median of %d rounds, against auth none (%.0f req/s, p99 %.2f ms):\n", o.rounds, base.RPS, ms(base.P99))
	for _, ar := range authRuns {
		m := median(byLabel[ar.label])
		name := strings.NewReplacer(" ", "_", "(", "", ")", "").Replace(ar.label)
		rep.add("ingest."+name+".rps", m.RPS, "req/s")
		rep.add("ingest."+name+".p99", ms(m.P99), "ms")
		if ar.typ == "none" {
			continue
		}
		ratio := m.RPS / base.RPS
		fmt.Printf("   %-22s %8.0f req/s (%.2fx, %+.1f%%), p99 %.2f ms (%+.2f ms)\n", ar.label, m.RPS, ratio, (ratio-1)*100, ms(m.P99), ms(m.P99-base.P99))
		rep.row("ingest with "+ar.label+" / none", fmt.Sprintf("%.2fx", ratio), ">= 0.85x", verdict(ratio >= 0.85))
	}
	fmt.Println()
	return nil
}

// authIngest runs one closed-loop ingest against a fresh agentbus with ar's
// authentication.
func authIngest(o options, src *bodies, ar authRun, label string) (loadResult, error) {
	return abIngestWith(startAgentbus, o, src, label, "", ar.credential, func(c *settings.Config) {
		c.Auth.Type = ar.typ
		c.Limits.Rate = settings.Rate{}
		if ar.typ != "none" {
			c.Auth.BootstrapKey = "bench-bootstrap-key-0123456789"
		}
	})
}

// benchKey creates a read-write API key on ab's store.
func benchKey(ab *abServer) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := ab.Conn.KV(ctx, natsjs.KeysBucket("agentbus"))
	if err != nil {
		return "", "", err
	}
	key, rec, err := auth.NewKeys(kv, nil).Create(ctx, auth.NewKeyRequest{
		Tenants: []string{"default"}, Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}, Description: "bench"})
	if err != nil {
		return "", "", err
	}
	return key, rec.ID, nil
}

// benchToken gets a bearer token for the key from the token endpoint.
func benchToken(base, id, key string) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, base+auth.TokenPath, strings.NewReader("grant_type=client_credentials"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(key))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var tr auth.TokenResponse
	if err := json.NewDecoder(res.Body).Decode(&tr); err != nil || tr.AccessToken == "" {
		return "", fmt.Errorf("token endpoint: %d %v", res.StatusCode, err)
	}
	return tr.AccessToken, nil
}
