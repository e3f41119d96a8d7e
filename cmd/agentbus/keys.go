package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbus/agentbus/pkg/auth"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/settings"
)

// authFlags are the serve switches of authentication and tenancy.
type authFlags struct {
	auth, tenants       string
	openTenants, inject bool
	insecure            bool
}

// applyAuthFlags applies the authentication switches: env over the config
// file, flags over env.
func applyAuthFlags(cfg *settings.Config, f authFlags) error {
	set(&cfg.Auth.Type, f.auth, "AGENTBUS_AUTH")
	if v, ok := os.LookupEnv("AGENTBUS_BOOTSTRAP_KEY"); ok {
		cfg.Auth.BootstrapKey = settings.Secret(v)
	}
	var tenants string
	if set(&tenants, f.tenants, "AGENTBUS_TENANTS") {
		cfg.Tenancy.Tenants = splitList(tenants)
	}
	if err := setBool(&cfg.Tenancy.Open, f.openTenants, "AGENTBUS_OPEN_TENANTS"); err != nil {
		return err
	}
	if err := setBool(&cfg.Events.AllowInjection, f.inject, "AGENTBUS_ALLOW_EVENT_INJECTION"); err != nil {
		return err
	}
	return setBool(&cfg.Auth.AllowInsecureListen, f.insecure, "AGENTBUS_ALLOW_INSECURE_LISTEN")
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

const keysUsage = `usage:
  agentbus keys create --tenant <id>[,<id>...|*] [--scope read,write] [--description text] [--ttl 720h] [flags]
  agentbus keys list [--json] [flags]
  agentbus keys revoke <key id> [flags]

` + keysNotes + `

Run 'agentbus keys <command> -h' for the flags of a command.`

// keysNotes follows the synopsis of every keys command's -h.
const keysNotes = `The key is printed once, on standard output; only its SHA-256 is stored.
Scopes: read, write, admin (admin only allows event injection). --tenant *
means every tenant; in single-tenant mode the default tenant is "default".
The commands do not ask a running agentbus its tenancy: for a multi-tenant
one, give --tenancy multi (or AGENTBUS_TENANCY, or serve's --config).
The commands reach NATS like serve does: --nats-url, or the embedded server
of the agentbus running on --data (with the administrator's credential it
keeps there while its NATS port requires credentials, else on nats.listen,
127.0.0.1:4222), or else the embedded store in --data.`

// keyFlags are the flags of keys create.
type keyFlags struct {
	tenant, scope, description, ttl string
}

// keys runs `agentbus keys create|list|revoke`.
func keys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintln(stderr, keysUsage)
		if len(args) == 0 {
			return errors.New("no keys command given")
		}
		return nil
	}
	sub, args := args[0], args[1:]
	var (
		fs       *flag.FlagSet
		settings = adminSettings
		kf       keyFlags
		asJSON   bool
		id       string
	)
	switch sub {
	case "create":
		fs = newFlags("keys create", "usage: agentbus keys create --tenant <id>[,<id>...|*] [--scope read,write] [--description text] [--ttl 720h] [flags]\n\n"+keysNotes, stderr)
		fs.StringVar(&kf.tenant, "tenant", "", "tenants the key is valid for: an id, a comma-separated list, or * for every tenant; required in multi-tenant mode (default \"default\" in single-tenant mode)")
		fs.StringVar(&kf.scope, "scope", "read,write", "comma-separated scopes: read, write, admin")
		fs.StringVar(&kf.description, "description", "", "what the key is for, shown by keys list")
		fs.StringVar(&kf.ttl, "ttl", "", "how long the key is valid, e.g. 720h (default: until revoked)")
		settings = append(slices.Clone(adminSettings), "tenancy") // --tenant depends on it
	case "list":
		fs = newFlags("keys list", "usage: agentbus keys list [--json] [flags]\n\nLists the API keys: ids, tenants, scopes, state; never secrets.", stderr)
		fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	case "revoke":
		fs = newFlags("keys revoke", "usage: agentbus keys revoke <key id> [flags]\n\nRevokes a key; every replica refuses it within a second.", stderr)
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			id, args = args[0], args[1:]
		}
	default:
		fmt.Fprintln(stderr, keysUsage)
		return fmt.Errorf("unknown keys command %q", sub)
	}
	cfg, err := loadConfig(fs, args, settings...)
	if err != nil {
		return err
	}
	if sub == "revoke" && id == "" {
		return errors.New("usage: agentbus keys revoke <key id> [flags]")
	}
	log := newLogger(cfg, stderr)

	var req auth.NewKeyRequest
	if sub == "create" {
		if req, err = keyRequest(cfg, kf); err != nil {
			return err
		}
	}
	reg, closeFn, err := openKeys(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeFn()

	switch sub {
	case "create":
		key, rec, err := reg.Create(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, key)
		fmt.Fprintf(stderr, "created key %s (tenants %s, scopes %s). It is shown only this once: store it now.\n",
			rec.ID, strings.Join(rec.Tenants, ","), joinScopes(rec.Scopes))
		return nil
	case "revoke":
		rec, err := reg.Revoke(ctx, id)
		if errors.Is(err, auth.ErrNoSuchKey) {
			return fmt.Errorf("no key %s", id)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s at %s\n", rec.ID, rec.RevokedAt.Format(time.RFC3339))
		return nil
	}
	list := reg.List()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(listJSON(list))
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANTS\tSCOPES\tCREATED\tSTATE\tDESCRIPTION")
	now := time.Now()
	for _, k := range list {
		state := "active"
		switch {
		case k.RevokedAt != nil:
			state = "revoked " + k.RevokedAt.Format(time.RFC3339)
		case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
			state = "expired " + k.ExpiresAt.Format(time.RFC3339)
		case k.ExpiresAt != nil:
			state = "active until " + k.ExpiresAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, strings.Join(k.Tenants, ","), joinScopes(k.Scopes),
			k.CreatedAt.Format(time.RFC3339), state, k.Description)
	}
	return tw.Flush()
}

// keyJSON is a key as keys list --json prints it: without its hash (not a
// secret, but of no use to a reader). The outer, empty Hash hides Key.Hash.
type keyJSON struct {
	auth.Key
	Hash string `json:"hash,omitempty"`
}

// listJSON is the keys list --json output ([] when there is no key).
func listJSON(list []auth.Key) []keyJSON {
	out := make([]keyJSON, len(list))
	for i, k := range list {
		out[i] = keyJSON{Key: k}
	}
	return out
}

func joinScopes(s []auth.Scope) string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return strings.Join(out, ",")
}

func keyRequest(cfg settings.Config, f keyFlags) (auth.NewKeyRequest, error) {
	var req auth.NewKeyRequest
	tenants := splitList(f.tenant)
	if len(tenants) == 0 {
		if cfg.Tenancy.Mode == "multi" {
			return req, errors.New("--tenant is required in multi-tenant mode (a tenant id, a comma-separated list, or * for all)")
		}
		tenants = []string{envelope.DefaultTenant}
	}
	for _, t := range tenants {
		switch {
		case t != auth.AllTenants && !envelope.ValidTenant(t):
			return req, fmt.Errorf("--tenant %q: must be * or match [a-z0-9][a-z0-9-]{0,62}", t)
		case cfg.Tenancy.Mode != "multi" && t != auth.AllTenants && t != envelope.DefaultTenant:
			return req, fmt.Errorf("--tenant %q: this command takes agentbus to be single-tenant, where the one tenant is %q "+
				"(a key for another could never be used); for a multi-tenant agentbus give its tenancy as serve has it: "+
				"--tenancy multi, AGENTBUS_TENANCY=multi, or the --config that sets tenancy.mode", t, envelope.DefaultTenant)
		}
	}
	scope := f.scope
	if scope == "" {
		scope = "read,write"
	}
	scopes, err := auth.ParseScopes(scope)
	if err != nil {
		return req, fmt.Errorf("--scope: %w", err)
	}
	req = auth.NewKeyRequest{Tenants: tenants, Scopes: scopes, Description: f.description}
	if v := f.ttl; v != "" {
		if req.TTL, err = time.ParseDuration(v); err != nil || req.TTL <= 0 {
			return req, fmt.Errorf("--ttl %q: must be a positive duration such as 720h", v)
		}
	}
	return req, nil
}

// openKeys connects to NATS (see connectAdmin), makes sure the key bucket
// exists and loads the keys.
func openKeys(ctx context.Context, cfg settings.Config, log *slog.Logger) (*auth.Keys, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := connectAdmin(cctx, cfg, "agentbus-keys", log)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*auth.Keys, func(), error) {
		conn.Close()
		return nil, nil, err
	}
	bucket := natsjs.KeysBucket(cfg.NATS.Prefix)
	if _, err := applyStores(cctx, conn, cfg, func(sp natsjs.Spec) bool { return sp.Kind == "kv" && sp.Name == bucket }); err != nil {
		return fail(err)
	}
	kv, err := conn.KV(cctx, bucket)
	if err != nil {
		return fail(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	reg := auth.NewKeys(kv, log)
	if err := reg.Start(wctx); err != nil {
		wcancel()
		return fail(err)
	}
	return reg, func() { wcancel(); conn.Close() }, nil
}
