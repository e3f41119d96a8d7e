package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/agentbus/agentbus/pkg/settings"
)

// stageOrder is the order stages run in; those in onlyWhenNamed run
// only when -only names them.
var stageOrder = []string{"ingest", "auth", "agentbus", "capacity", "instruments", "latency", "cluster_latency", "replicas", "million", "sync", "memory", "rss", "webhooks", "push", "soak", "restart", "stores", "aggregates", "store_options"}

// onlyWhenNamed are the stages a whole bench leaves out.
var onlyWhenNamed = []string{"agentbus", "replicas", "soak", "restart", "stores", "aggregates", "store_options"}

// stages lists the stages this run selects, in order (sync not when
// -sync=false: it would print nothing).
func (o options) stages() []string {
	var out []string
	for _, st := range stageOrder {
		if o.stage(st) && (!slices.Contains(onlyWhenNamed, st) || o.only != "") && (st != "sync" || o.sync) {
			out = append(out, st)
		}
	}
	return out
}

// A whole bench runs every stage in a process of its own (this program
// again, with -only STAGE -stage-child), one after the other, each as
// `-only STAGE` starts it: no stage meets the heap others left behind (the
// ingest stage's request bodies, kept for the sync stage, would be marked
// by every collection of the stages after it). The measurements:
// test/bench/README.md, "A stage in its own process".

// childReportPrefix starts the line a stage's process ends with: its
// figures and summary rows, and what is left of the quiet-wait budget.
const childReportPrefix = "BENCHSTAGE "

type childReport struct {
	Figures   []figure      `json:"figures"`
	Summary   [][]string    `json:"summary"`
	QuietLeft time.Duration `json:"quietLeft"`
}

// writeChildReport ends a stage's process.
func writeChildReport(rep *report) error {
	b, err := json.Marshal(childReport{Figures: rep.figures, Summary: rep.summary, QuietLeft: quietBudget})
	if err != nil {
		return err
	}
	fmt.Printf("\n%s%s\n", childReportPrefix, b) // on a line of its own whatever came before
	return nil
}

// isolate reports whether stages run in processes of their own: when
// there are several, and always for the rss stage, which runs once per
// memory mode, and the stores stage, which runs once per store.
func (o options) isolate(stages []string) bool {
	return !o.child && (len(stages) > 1 || slices.Contains(stages, "rss") || slices.Contains(stages, "stores"))
}

// runIsolated runs each of stages in a process of its own (the rss stage
// in one per memory mode, the stores stage in one per store), passing its
// output through and gathering its report into rep.
func runIsolated(o options, stages []string, rep *report) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("isolate stages: %w", err)
	}
	type run struct {
		stage, mode string
		extra       []string // more flags for the stage's process
	}
	var runs []run
	for _, st := range stages {
		switch st {
		case "rss":
			for _, m := range rssModes {
				runs = append(runs, run{st, m, nil})
			}
		case "stores": // in agentbus's default memory mode, as it would run
			for _, e := range storeEngines {
				runs = append(runs, run{st, settings.MemoryBudget, []string{"-stores-engine", e}})
			}
		default:
			runs = append(runs, run{st, o.memory, nil})
		}
	}
	for _, r := range runs {
		st := r.stage
		args := append(slices.Clone(os.Args[1:]), "-only", st, "-stage-child", "-quiet-wait", quietBudget.String(), "-memory-mode", r.mode)
		args = append(args, r.extra...)
		cmd := exec.Command(exe, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("stage %s: %w", st, err)
		}
		var got *childReport
		var reportErr error
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			if raw, ok := strings.CutPrefix(line, childReportPrefix); ok {
				var r childReport
				if reportErr = json.Unmarshal([]byte(raw), &r); reportErr == nil {
					got = &r
				}
				continue
			}
			fmt.Println(line)
		}
		scanErr := sc.Err()
		if scanErr != nil { // the stage may block on a full pipe: end it
			_ = cmd.Process.Kill()
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("stage %s: %w", st, err)
		}
		if scanErr != nil {
			return fmt.Errorf("stage %s: output: %w", st, scanErr)
		}
		if reportErr != nil {
			return fmt.Errorf("stage %s: report: %w", st, reportErr)
		}
		if got == nil {
			return fmt.Errorf("stage %s: ended without its report", st)
		}
		rep.figures = append(rep.figures, got.Figures...)
		rep.summary = append(rep.summary, got.Summary...)
		quietBudget = got.QuietLeft
	}
	return nil
}
