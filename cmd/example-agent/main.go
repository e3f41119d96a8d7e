// Command example-agent is a runnable agentbus agent: a billing agent that
// takes ChargeCustomer commands from the durable consumer agentbus created
// for it when it was registered, and answers each with a CustomerCharged
// event (or a CommandRejected when the order was already charged).
//
// Run agentbus with this agent's catalogue loaded and its embedded NATS
// reachable (the default 127.0.0.1:4222), then the agent:
//
//	go run ./cmd/agentbus serve --config cmd/example-agent/agentbus.yaml
//	go run ./cmd/example-agent --register
//
// --register registers the agent over REST first (POST /agents; an agent
// already registered is fine). Without it the agent must have been
// registered, accepting ChargeCustomer. The agent consumes from
// "agent_<tenant>_<id>" with pkg/processor; pausing the agent over REST
// holds its commands back, resuming delivers them, deleting it removes the
// consumer (the program then says so and waits until stopped). It logs one
// line per command it handles: correlation id, type and outcome.
package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentbus/agentbus/pkg/bus"
	"github.com/agentbus/agentbus/pkg/catalog"
	"github.com/agentbus/agentbus/pkg/decide"
	"github.com/agentbus/agentbus/pkg/envelope"
	"github.com/agentbus/agentbus/pkg/errs"
	"github.com/agentbus/agentbus/pkg/natsjs"
	"github.com/agentbus/agentbus/pkg/processor"
)

//go:embed catalog
var catalogFS embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "example-agent:", err)
		os.Exit(1)
	}
}

// synopsis heads -h.
const synopsis = `usage: example-agent [--register] [flags]

A billing agent: it takes ChargeCustomer commands from the consumer agentbus
made for it and answers each with CustomerCharged, or CommandRejected when
the order was charged already. Start agentbus with the agent's catalogue
first (from the repository root):

  go run ./cmd/agentbus serve --config cmd/example-agent/agentbus.yaml
  go run ./cmd/example-agent --register`

// run runs the agent until ctx ends, and returns nil then; -h prints its
// usage and returns nil. When its consumer is deleted it logs that and
// waits for ctx to end.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fl := flag.NewFlagSet("example-agent", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "%s\n\nflags:\n", synopsis)
		fl.PrintDefaults()
	}
	var (
		natsURL  = fl.String("nats", "nats://127.0.0.1:4222", "NATS server agentbus runs on")
		base     = fl.String("agentbus", "http://127.0.0.1:8080", "agentbus REST base address (with /{tenantId} in multi-tenant mode)")
		tenant   = fl.String("tenant", "default", "tenant the agent belongs to (\"default\" in single-tenant mode)")
		id       = fl.String("id", "billing-agent", "agent id")
		register = fl.Bool("register", false, "register the agent over REST before consuming")
	)
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *register {
		if err := registerAgent(ctx, *base, *id); err != nil {
			return err
		}
	}
	dir, _ := fs.Sub(catalogFS, "catalog")
	cat, err := catalog.Load(catalog.Builtin(), dir)
	if err != nil {
		return err
	}
	err = processor.Run(ctx, processor.Config{
		NATS:       natsjs.Config{URL: *natsURL, Name: "example-agent " + *id},
		Durable:    bus.AgentConsumer(*tenant, *id),
		Bind:       true, // agentbus created and owns the consumer
		Source:     "example-agent/" + *id,
		SchemaBase: *base,
		Catalog:    cat,
		Logger:     log,
	}, map[string]decide.Decider{"ChargeCustomer": logged(log, charge(*id))})
	if errors.Is(err, natsjs.ErrConsumerDeleted) {
		log.Info("the agent's consumer was deleted (DELETE /agents/"+*id+"); waiting until stopped", "err", err)
		<-ctx.Done()
		return nil
	}
	return err
}

// charge decides ChargeCustomer: one CustomerCharged per order, on the
// aggregate ("charge", orderId); charging an order twice is rejected with
// AGGREGATE_ALREADY_EXISTS. It reads the order's charge before deciding,
// so that its decision is the command's outcome (barring a concurrent
// charge of the same order, after which the processor decides again).
func charge(agentID string) decide.Decider {
	return decide.DeciderFunc(func(ctx context.Context, cmd decide.Command, s decide.State) (decide.Decision, error) {
		var in struct {
			CustomerID string `json:"customerId"`
			OrderID    string `json:"orderId"`
			Amount     int64  `json:"amount"`
		}
		if err := json.Unmarshal(cmd.Envelope.Data, &in); err != nil {
			return decide.Rejected(errs.CodeValidationFailed, "data: %s", envelope.JSONProblem(cmd.Envelope.Data, err)), nil
		}
		last, err := s.LastEvent(ctx, cmd.Tenant, "charge", in.OrderID)
		switch {
		case errors.Is(err, errs.ErrNotFound):
		case err != nil:
			return decide.Decision{}, err
		case last.Header.Get(bus.HeaderCorrelationID) == cmd.CorrelationID:
			return decide.Decision{}, nil // a redelivery of the command that charged it: done
		default:
			return decide.Rejected(errs.CodeAggregateExists, "order %q is charged already", in.OrderID), nil
		}
		data, _ := json.Marshal(map[string]any{
			"customerId": in.CustomerID, "orderId": in.OrderID, "amount": in.Amount, "chargedBy": agentID,
		})
		ev := decide.NewEvent{Type: "CustomerCharged", AggType: "charge", AggID: in.OrderID, Data: data}
		return decide.Decision{Events: []decide.NewEvent{ev}, Expect: &bus.Expect{LastSeq: 0}}, nil
	})
}

// logged logs one line for each decision of d: the command's correlation
// id and type, and its outcome — the types of the events it yields, or
// "rejected" with the code and message, or "done before" for a redelivery
// of a command whose events are stored. A decision taken again after a
// concurrent change of the aggregate also carries attempt; a failure to
// decide (retried with the command's redelivery) is a warning.
func logged(log *slog.Logger, d decide.Decider) decide.Decider {
	return decide.DeciderFunc(func(ctx context.Context, cmd decide.Command, s decide.State) (decide.Decision, error) {
		dec, err := d.Decide(ctx, cmd, s)
		attrs := []any{"correlationId", cmd.CorrelationID, "type", cmd.Type}
		if cmd.Attempt > 0 {
			attrs = append(attrs, "attempt", cmd.Attempt)
		}
		switch {
		case err != nil:
			log.Warn("command not decided; it will be redelivered", append(attrs, "err", err)...)
		case dec.Reject != nil:
			log.Info("handled command", append(attrs, "outcome", "rejected", "code", dec.Reject.Code, "reason", dec.Reject.Message)...)
		case len(dec.Events) == 0:
			log.Info("handled command", append(attrs, "outcome", "done before")...)
		default:
			types := make([]string, len(dec.Events))
			for i, ev := range dec.Events {
				types[i] = ev.Type
			}
			log.Info("handled command", append(attrs, "outcome", strings.Join(types, ","))...)
		}
		return dec, err
	})
}

// registerAgent registers the agent over REST; 409 (already registered) is
// fine.
func registerAgent(ctx context.Context, base, id string) error {
	body, _ := json.Marshal(map[string]any{
		"id": id, "name": "Billing agent", "description": "Charges customers (cmd/example-agent).",
		"accepts": []string{"ChargeCustomer"}, "produces": []string{"CustomerCharged"},
	})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+"/agents", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	switch res.StatusCode {
	case http.StatusCreated, http.StatusConflict:
		return nil
	case http.StatusAccepted:
		return errors.New("register: agentbus is still processing the registration; run again without --register once GET /agents/" + id + " answers")
	}
	return fmt.Errorf("register: %d %s", res.StatusCode, bytes.TrimSpace(answer))
}
