package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentbus/agentbus/pkg/client"
)

const agentsUsage = `usage:
  agentbus agents list [--limit N] [--after CURSOR] [flags]
  agentbus agents get ID [flags]
  agentbus agents register --name NAME [--id ID] [--description TEXT] [--accepts T,..] [--produces T,..] [flags]
  agentbus agents pause|resume|delete ID [flags]

` + clientNotes

const servicesUsage = `usage:
  agentbus services list [--limit N] [--after CURSOR] [flags]
  agentbus services get ID [flags]
  agentbus services register --name NAME [--id ID] [--description TEXT] [--accepts T,..] [--produces T,..] [flags]
  agentbus services delete ID [flags]

` + clientNotes

const subscriptionsUsage = `usage:
  agentbus subscriptions list [--limit N] [--after CURSOR] [flags]
  agentbus subscriptions get ID [flags]
  agentbus subscriptions create --webhook URL [--type T]... [--service ID] [--secret S] [flags]
  agentbus subscriptions create --data @subscription.json|-|'{...}' [flags]
  agentbus subscriptions enable|delete ID [flags]
  agentbus subscriptions disable ID [--reason TEXT] [flags]
  agentbus subscriptions deliveries ID [flags]
  agentbus subscriptions secret ID [flags]
  agentbus subscriptions rotate-secret ID [--secret S] [flags]
  agentbus subscriptions redeliver ID [flags]
  agentbus subscriptions replay ID --after CURSOR|0|--since TIME [flags]

secret prints the subscription's current signing secret, given or
generated (write scope); no other answer carries it. redeliver (the dead
letters) and replay (after an event's cursor, as deliveries prints it, 0
for the start of the log, or from a time) need the admin scope.

` + clientNotes

// registryCmd is one registry command: its flags, then what it does.
type registryCmd struct {
	args  string // the positional arguments it takes: "" or "ID"
	flags func(fs *flag.FlagSet) func(ctx context.Context, cl *client.Client, c *conn, id string, stdout io.Writer) error
}

// registry runs `agentbus agents|services|subscriptions <command>`.
func registry(ctx context.Context, name, usage string, cmds map[string]registryCmd, args []string, stdout, stderr io.Writer) error {
	stdout = terminalWriter{stdout}
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintln(stderr, usage)
		if len(args) == 0 {
			return fmt.Errorf("no %s command given", name)
		}
		return nil
	}
	rc, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("unknown %s command %q", name, args[0])
	}
	fs := newFlags(name+" "+args[0], usage, stderr)
	c := addConnFlags(fs)
	do := rc.flags(fs)
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if want := len(strings.Fields(rc.args)); len(pos) != want {
		return fmt.Errorf("usage: agentbus %s %s %s [flags]", name, args[0], rc.args)
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	return apiError(do(ctx, cl, c, id, stdout))
}

// pageFlags adds --limit and --after.
func pageFlags(fs *flag.FlagSet) *client.Page {
	p := &client.Page{}
	fs.IntVar(&p.Limit, "limit", 0, "records per page (default: agentbus's)")
	fs.StringVar(&p.After, "after", "", "start after this cursor (a page's next)")
	return p
}

// specFlags adds the flags of an agent or service registration.
func specFlags(fs *flag.FlagSet) (*client.AgentSpec, *listFlag, *listFlag) {
	s := &client.AgentSpec{}
	var accepts, produces listFlag
	fs.StringVar(&s.ID, "id", "", "the id (default: agentbus chooses one)")
	fs.StringVar(&s.Name, "name", "", "the name")
	fs.StringVar(&s.Description, "description", "", "what it does")
	fs.Var(&accepts, "accepts", "command types it accepts (repeatable, or comma-separated)")
	fs.Var(&produces, "produces", "event types it produces (repeatable, or comma-separated)")
	return s, &accepts, &produces
}

// done prints what a change did, or nothing with --json (its answer has
// no body).
func done(c *conn, stdout io.Writer, format string, a ...any) error {
	if c.json {
		return nil
	}
	_, err := fmt.Fprintf(stdout, format+"\n", a...)
	return err
}

// printNext writes the cursor of a list's next page, if any.
func printNext(w io.Writer, next string) {
	if next != "" {
		fmt.Fprintf(w, "next: %s\n", next)
	}
}

// printFields writes name, value lines, aligned, skipping empty values.
func printFields(w io.Writer, kv ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", kv[i], kv[i+1])
		}
	}
	return tw.Flush()
}

func agentFields(w io.Writer, a *client.Agent) error {
	pending := ""
	if p := a.Pending; p != nil {
		pending = fmt.Sprintf("%d commands waiting, %d in flight", p.Commands, p.InFlight)
	}
	return printFields(w, "id", a.ID, "name", a.Name, "description", a.Description, "status", a.Status, "error", a.Error,
		"accepts", strings.Join(a.Accepts, ","), "produces", strings.Join(a.Produces, ","), "pending", pending,
		"created", a.CreatedAt, "updated", a.UpdatedAt)
}

func serviceFields(w io.Writer, s *client.Service) error {
	return printFields(w, "id", s.ID, "name", s.Name, "description", s.Description,
		"accepts", strings.Join(s.Accepts, ","), "produces", strings.Join(s.Produces, ","), "created", s.CreatedAt)
}

func subscriptionFields(w io.Writer, s *client.Subscription) error {
	types := "every event type"
	if s.Filter != nil {
		types = strings.Join(s.Filter.Types, ",")
	}
	return printFields(w, "id", s.ID, "webhook", s.Webhook.URL, "types", types, "service", s.ServiceID,
		"status", s.Status, "reason", s.StatusReason, "created", s.CreatedAt, "updated", s.UpdatedAt)
}

// agentsCmds are the agents commands.
var agentsCmds = map[string]registryCmd{
	"list": listCmd((*client.Client).ListAgents, "ID\tNAME\tSTATUS\tACCEPTS\tPRODUCES",
		func(p *client.AgentPage) ([][]string, string) {
			rows := make([][]string, len(p.Agents))
			for i, a := range p.Agents {
				rows[i] = []string{a.ID, a.Name, a.Status, strings.Join(a.Accepts, ","), strings.Join(a.Produces, ",")}
			}
			return rows, p.Next
		}),
	"get":      getCmd((*client.Client).GetAgent, agentFields),
	"register": registerCmd((*client.Client).RegisterAgent, agentFields),
	"pause":    change("agent", "paused", (*client.Client).PauseAgent),
	"resume":   change("agent", "resumed", (*client.Client).ResumeAgent),
	"delete":   change("agent", "deleted", (*client.Client).DeleteAgent),
}

// servicesCmds are the services commands.
var servicesCmds = map[string]registryCmd{
	"list": listCmd((*client.Client).ListServices, "ID\tNAME\tACCEPTS\tPRODUCES",
		func(p *client.ServicePage) ([][]string, string) {
			rows := make([][]string, len(p.Services))
			for i, s := range p.Services {
				rows[i] = []string{s.ID, s.Name, strings.Join(s.Accepts, ","), strings.Join(s.Produces, ",")}
			}
			return rows, p.Next
		}),
	"get":      getCmd((*client.Client).GetService, serviceFields),
	"register": registerCmd((*client.Client).RegisterService, serviceFields),
	"delete":   change("service", "deleted", (*client.Client).DeleteService),
}

// subscriptionsCmds are the subscriptions commands.
var subscriptionsCmds = map[string]registryCmd{
	"list": listCmd((*client.Client).ListSubscriptions, "ID\tSTATUS\tWEBHOOK\tTYPES\tSERVICE",
		func(p *client.SubscriptionPage) ([][]string, string) {
			rows := make([][]string, len(p.Subscriptions))
			for i, s := range p.Subscriptions {
				types := "*"
				if s.Filter != nil {
					types = strings.Join(s.Filter.Types, ",")
				}
				rows[i] = []string{s.ID, s.Status, s.Webhook.URL, types, s.ServiceID}
			}
			return rows, p.Next
		}),
	"get": getCmd((*client.Client).GetSubscription, subscriptionFields),
	"create": {flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		var url, service, secret, data string
		var types listFlag
		fs.StringVar(&url, "webhook", "", "the receiver's URL")
		fs.Var(&types, "type", "deliver events of this type (repeatable, or comma-separated; default every type)")
		fs.StringVar(&service, "service", "", "the registered service the subscription is for")
		fs.StringVar(&secret, "secret", "", "the signing secret (default: agentbus generates one; agentbus subscriptions secret ID reads it); a flag shows in process listings, --data @file does not")
		fs.StringVar(&data, "data", "", "the whole request body instead: @file.json, - for standard input, or the JSON itself")
		return func(ctx context.Context, cl *client.Client, c *conn, _ string, w io.Writer) error {
			body, err := subscriptionBody(data, url, service, secret, types)
			if err != nil {
				return err
			}
			s, err := cl.CreateSubscription(ctx, body)
			if err != nil || c.json {
				return orJSON(w, s, err)
			}
			if err := subscriptionFields(w, s); err != nil {
				return err
			}
			if !givesSecret(body) {
				_, err = fmt.Fprintf(w, "(agentbus generated the signing secret: agentbus subscriptions secret %s prints it)\n", s.ID)
			}
			return err
		}
	}},
	"secret": {args: "ID", flags: func(*flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			secret, err := cl.SubscriptionSecret(ctx, id)
			if err != nil || c.json {
				return orJSON(w, map[string]string{"id": id, "secret": secret}, err)
			}
			_, err = fmt.Fprintln(w, secret)
			return err
		}
	}},
	"enable": change("subscription", "enabled", (*client.Client).EnableSubscription),
	"delete": change("subscription", "deleted", (*client.Client).DeleteSubscription),
	"disable": {args: "ID", flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		reason := fs.String("reason", "disabled with agentbus subscriptions disable", "why, kept as the subscription's statusReason")
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			if err := cl.DisableSubscription(ctx, id, *reason); err != nil {
				return err
			}
			return done(c, w, "disabled subscription %s", id)
		}
	}},
	"rotate-secret": {args: "ID", flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		secret := fs.String("secret", "", "the new signing secret (default: agentbus generates one; agentbus subscriptions secret ID reads it); a flag shows in process listings")
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			r, err := cl.RotateSubscriptionSecret(ctx, id, *secret)
			if err != nil || c.json {
				return orJSON(w, r, err)
			}
			if err := printFields(w, "id", r.ID, "previous secret valid until", r.PreviousSecretValidUntil); err != nil {
				return err
			}
			if *secret == "" {
				_, err = fmt.Fprintf(w, "(agentbus generated the new signing secret: agentbus subscriptions secret %s prints it)\n", r.ID)
			}
			return err
		}
	}},
	"redeliver": {args: "ID", flags: func(*flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			r, err := cl.RedeliverSubscription(ctx, id)
			if err != nil || c.json {
				return orJSON(w, r, err)
			}
			_, err = fmt.Fprintf(w, "redelivering %d dead letter(s) of subscription %s\n", r.DeadLetters, r.ID)
			return err
		}
	}},
	"replay": {args: "ID", flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		after := fs.String("after", "", "go on after the event of this cursor (a delivery's, as deliveries prints it; 0 for the whole log)")
		since := fs.String("since", "", "go on after the last event stored before this RFC 3339 time")
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			var from client.ReplayFrom
			switch {
			case (*after == "") == (*since == ""):
				return errors.New("give exactly one of --after and --since")
			case *after != "":
				from.After = *after
			default:
				t, err := time.Parse(time.RFC3339Nano, *since)
				if err != nil {
					return fmt.Errorf("--since %q: not an RFC 3339 time, e.g. 2026-01-02T15:04:05Z", *since)
				}
				from.Since = t
			}
			r, err := cl.ReplaySubscription(ctx, id, from)
			if err != nil || c.json {
				return orJSON(w, r, err)
			}
			if r.After == "0" {
				_, err = fmt.Fprintf(w, "subscription %s: delivery goes on from the start of the log\n", r.ID)
			} else {
				_, err = fmt.Fprintf(w, "subscription %s: delivery goes on after the event of cursor %s\n", r.ID, r.After)
			}
			return err
		}
	}},
	"deliveries": {args: "ID", flags: func(*flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			ds, err := cl.Deliveries(ctx, id)
			if err != nil || c.json {
				return orJSON(w, map[string]any{"deliveries": ds}, err)
			}
			for _, d := range ds {
				fmt.Fprintf(w, "event %s %s  cursor %s  correlation %s  %s\n", d.EventType, d.EventID, d.Cursor, d.CorrelationID, d.Status)
				for _, a := range d.Attempts {
					printAttempt(w, a)
				}
			}
			return nil
		}
	}},
}

// change is a registry command that changes the record ID and has no
// answer body: it prints "<did> <what> <id>".
func change(what, did string, fn func(*client.Client, context.Context, string) error) registryCmd {
	return registryCmd{args: "ID", flags: func(*flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			if err := fn(cl, ctx, id); err != nil {
				return err
			}
			return done(c, w, "%s %s %s", did, what, id)
		}
	}}
}

// listCmd is a list command: a page of records, as a table with header
// (tab-separated columns) and the rows rows makes of a page, then the
// next page's cursor; the page as JSON with --json.
func listCmd[P any](list func(*client.Client, context.Context, client.Page) (*P, error), header string, rows func(*P) ([][]string, string)) registryCmd {
	return registryCmd{flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		p := pageFlags(fs)
		return func(ctx context.Context, cl *client.Client, c *conn, _ string, w io.Writer) error {
			page, err := list(cl, ctx, *p)
			if err != nil || c.json {
				return orJSON(w, page, err)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, header)
			all, next := rows(page)
			for _, r := range all {
				fmt.Fprintln(tw, strings.Join(r, "\t"))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			printNext(w, next)
			return nil
		}
	}}
}

// getCmd is a get command: one record by id, printed by fields.
func getCmd[T any](get func(*client.Client, context.Context, string) (*T, error), fields func(io.Writer, *T) error) registryCmd {
	return registryCmd{args: "ID", flags: func(*flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		return func(ctx context.Context, cl *client.Client, c *conn, id string, w io.Writer) error {
			rec, err := get(cl, ctx, id)
			if err != nil || c.json {
				return orJSON(w, rec, err)
			}
			return fields(w, rec)
		}
	}}
}

// registerCmd is a register command: the registration's flags, the
// record it made printed by fields.
func registerCmd[T any](register func(*client.Client, context.Context, client.AgentSpec) (*T, error), fields func(io.Writer, *T) error) registryCmd {
	return registryCmd{flags: func(fs *flag.FlagSet) func(context.Context, *client.Client, *conn, string, io.Writer) error {
		spec, accepts, produces := specFlags(fs)
		return func(ctx context.Context, cl *client.Client, c *conn, _ string, w io.Writer) error {
			spec.Accepts, spec.Produces = *accepts, *produces
			rec, err := register(cl, ctx, *spec)
			if err != nil || c.json {
				return orJSON(w, rec, err)
			}
			return fields(w, rec)
		}
	}}
}

// orJSON returns err, or prints v as JSON.
func orJSON(w io.Writer, v any, err error) error {
	if err != nil {
		return err
	}
	return printJSON(w, v)
}

// givesSecret reports whether a createSubscription body gives the signing
// secret (webhook.secret).
func givesSecret(body json.RawMessage) bool {
	var b struct {
		Webhook struct {
			Secret *string `json:"secret"`
		} `json:"webhook"`
	}
	return json.Unmarshal(body, &b) == nil && b.Webhook.Secret != nil
}

// subscriptionBody returns the body of createSubscription: data as given,
// or built from the flags.
func subscriptionBody(data, url, service, secret string, types []string) (json.RawMessage, error) {
	if data != "" {
		if url != "" || service != "" || secret != "" || len(types) > 0 {
			return nil, errors.New("give --data or the --webhook, --type, --service and --secret flags, not both")
		}
		return readData(data)
	}
	if url == "" {
		return nil, errors.New("--webhook is required (or --data)")
	}
	body := map[string]any{"webhook": map[string]any{"url": url}}
	if secret != "" {
		body["webhook"].(map[string]any)["secret"] = secret
	}
	if service != "" {
		body["serviceId"] = service
	}
	if len(types) > 0 {
		body["filter"] = map[string]any{"types": types}
	}
	return json.Marshal(body)
}
