package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/client"
)

const traceSynopsis = `usage: agentbus trace CORRELATION-ID [flags]

Prints a command's story: the command (type, id, source, time), its status
(and why it was rejected), the events it caused, each webhook delivery
of those events with every attempt (time, the receiver's status, latency,
error, the kept excerpt of its answer), and each push of those events to a
live listener (time, transport, event, listener), as far as agentbus keeps
them (in memory, for recent commands).

` + clientNotes

// trace runs `agentbus trace`.
func trace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	stdout = terminalWriter{stdout}
	fs := newFlags("trace", traceSynopsis, stderr)
	c := addConnFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: agentbus trace CORRELATION-ID [flags]")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	tr, err := cl.Trace(ctx, pos[0])
	if err != nil {
		return apiError(err)
	}
	if c.json {
		return printJSON(stdout, tr)
	}
	printTrace(stdout, tr)
	return nil
}

// printTrace writes a trace for people.
func printTrace(w io.Writer, tr *client.Trace) {
	cmd := tr.Command
	fmt.Fprintf(w, "command      %s  id %s  source %s  time %s\n", orDash(cmd.Type), orDash(cmd.ID), orDash(cmd.Source), orDash(cmd.Time))
	fmt.Fprintf(w, "correlation  %s\nstatus       %s", tr.ID, tr.Status)
	if tr.Rejection != nil {
		fmt.Fprintf(w, ": %s: %s", tr.Rejection.Code, tr.Rejection.Message)
	}
	fmt.Fprintf(w, "\nupdated      %s\n", tr.UpdatedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "events       %d\n", len(tr.Events))
	for _, e := range tr.Events {
		fmt.Fprint(w, "  ")
		printEvent(w, e)
	}
	fmt.Fprintf(w, "deliveries   %d\n", len(tr.Deliveries))
	for _, d := range tr.Deliveries {
		fmt.Fprintf(w, "  subscription %s  event %s %s  %s\n", d.SubscriptionID, d.EventType, d.EventID, d.Status)
		for _, a := range d.Attempts {
			printAttempt(w, a)
		}
	}
	fmt.Fprintf(w, "pushes       %d", len(tr.Pushes))
	if tr.PushesOmitted > 0 {
		fmt.Fprintf(w, " (and %d more, not kept)", tr.PushesOmitted)
	}
	fmt.Fprintln(w)
	for _, p := range tr.Pushes {
		fmt.Fprintf(w, "  %s  %s  %s %s  %s\n", p.At.Format(time.RFC3339Nano), p.Transport, p.EventType, p.EventID, p.Listener)
	}
}

// printAttempt writes one delivery attempt on one line.
func printAttempt(w io.Writer, a client.Attempt) {
	status := "no answer"
	if a.StatusCode != 0 {
		status = fmt.Sprint(a.StatusCode)
	}
	line := fmt.Sprintf("    %s  %s  %.1fms", a.At.Format(time.RFC3339Nano), status, a.LatencyMs)
	if a.Error != "" {
		line += "  error: " + a.Error
	}
	if a.Response != "" {
		line += "  response: " + strings.Join(strings.Fields(a.Response), " ")
	}
	fmt.Fprintln(w, line)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
