package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/kandle/kandle/topology"
)

func cmdValidate(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "validate", "FILE...",
		"Checks each topology file and prints every problem as file:line:col: message, with a hint on how to\n"+
			"fix it. Exits 1 if any file has a problem.")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("name at least one topology file")
	}
	failed := false
	for _, f := range fs.Args() {
		t, err := topology.Load(f, sinkRegistry())
		if err != nil {
			failed = true
			_ = reportTopology(e, err)
			continue
		}
		fmt.Fprintf(e.stdout, "%s: ok (%d sources, %d processors, %d sinks)\n", f, len(t.Sources), len(t.Processors), len(t.Sinks))
	}
	if failed {
		return errQuiet
	}
	return nil
}

// reportTopology prints a topology's problems one per line.
func reportTopology(e *env, err error) error {
	var ps topology.Problems
	if errors.As(err, &ps) {
		for _, p := range ps {
			fmt.Fprintln(e.stderr, p.Error())
		}
		fmt.Fprintf(e.stderr, "%d problem(s)\n", len(ps))
		return errQuiet
	}
	return err
}
