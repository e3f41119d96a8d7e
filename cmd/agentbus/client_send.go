package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbus/agentbus/pkg/client"
)

const sendSynopsis = `usage: agentbus send TYPE [--data @file.json|-|'{...}'] [--wait] [flags]

Sends a command of TYPE with the data given (from a file, standard input or
the argument itself; {} when none), completing its envelope: a fresh id
(or --id), the source agentbus-cli (or --source), the newest schema version
of the catalogue (or --version), the time now. Prints the correlation id
agentbus answers; with --wait, waits for the command's outcome and prints
it with the events it caused. A refused command, or one rejected while
waiting, prints the API's error code and message and exits with status 1.

` + clientNotes

// send runs `agentbus send`.
func send(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	stdout = terminalWriter{stdout}
	fs := newFlags("send", sendSynopsis, stderr)
	c := addConnFlags(fs)
	var data, id, source, version string
	var wait bool
	var timeout time.Duration
	fs.StringVar(&data, "data", "", "the command's data: @file.json, - for standard input, or the JSON itself")
	fs.StringVar(&id, "id", "", "the envelope id (default: a fresh UUID); the same source and id are the same command")
	fs.StringVar(&source, "source", "", "the envelope source (default agentbus-cli)")
	fs.StringVar(&version, "version", "", "the schema version (default: the newest in the catalogue)")
	fs.BoolVar(&wait, "wait", false, "wait for the outcome and print it with the command's events")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long --wait waits")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: agentbus send TYPE [--data @file.json|-|'{...}'] [--wait] [flags]")
	}
	cmd := client.Command{Type: pos[0], ID: id, Source: source, Version: version}
	if data != "" {
		if cmd.Data, err = readData(data); err != nil {
			return err
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	acc, err := cl.Send(ctx, cmd)
	if err != nil {
		return apiError(err)
	}
	if !wait {
		if c.json {
			return printJSON(stdout, acc)
		}
		_, err := fmt.Fprintln(stdout, acc.ID)
		return err
	}
	if !c.json {
		fmt.Fprintln(stdout, acc.ID)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := cl.Wait(wctx, acc.ID)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			status := "unknown"
			if tr != nil {
				status = tr.Status
			}
			return fmt.Errorf("no outcome within %s (status %s): agentbus trace %s follows it", timeout, status, acc.ID)
		}
		return apiError(err)
	}
	if c.json {
		if err := printJSON(stdout, tr); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, tr.Status)
		for _, e := range tr.Events {
			printEvent(stdout, e)
		}
	}
	return apiError(tr.Err())
}

// printEvent writes an event on one line: time, type, id, data.
func printEvent(w io.Writer, e client.Event) {
	fmt.Fprintf(w, "%s  %s  %s  %s\n", e.Time, e.Type, e.ID, oneLine(e.Data))
}
