package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentbus/agentbus/pkg/client"
)

const eventsSynopsis = `usage: agentbus events [--type T]... [--correlation ID] [--after CURSOR] [--limit N] [--follow] [flags]

Prints a page of the event log, one event a line (time, type, id, data),
then the cursor of the next page; --after reads on from it. --follow
prints the events after --after (the whole log without it) and then each
event as it is published, until interrupted; a dropped connection is
resumed where it left off. With --json a page is the API's page object,
and --follow prints one envelope a line.

` + clientNotes

// events runs `agentbus events`.
func events(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	stdout = terminalWriter{stdout}
	fs := newFlags("events", eventsSynopsis, stderr)
	c := addConnFlags(fs)
	var types listFlag
	var q client.EventQuery
	var follow bool
	fs.Var(&types, "type", "keep the events of this type (repeatable, or comma-separated)")
	fs.StringVar(&q.CorrelationID, "correlation", "", "keep the events of the command with this correlation id")
	fs.StringVar(&q.After, "after", "", "start after this cursor (a page's next)")
	fs.IntVar(&q.Limit, "limit", 0, "events per page (default: agentbus's)")
	fs.BoolVar(&follow, "follow", false, "follow the log as it grows")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	q.Types = types
	cl, err := c.client()
	if err != nil {
		return err
	}
	if follow {
		err := cl.Follow(ctx, q, func(e client.Event) error {
			if c.json {
				_, err := fmt.Fprintln(stdout, oneLine(e.Raw))
				return err
			}
			printEvent(stdout, e)
			return nil
		})
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil // interrupted: the way a follow ends
		}
		return apiError(err)
	}
	p, err := cl.Events(ctx, q)
	if err != nil {
		return apiError(err)
	}
	if c.json {
		return printJSON(stdout, p)
	}
	for _, e := range p.Events {
		printEvent(stdout, e)
	}
	if p.Next != "" {
		fmt.Fprintf(stdout, "next: %s\n", p.Next)
	}
	return nil
}
