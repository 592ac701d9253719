package main

import (
	"context"
	"fmt"

	"github.com/kandle/kandle/topology"
)

func cmdDocs(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "docs", "", "Prints the topology reference (every key, type, default and meaning) generated from the\ncomponent specs; `make docs` writes it to docs/reference.md.")
	if err := e.parseNoArgs(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprint(e.stdout, topology.ReferenceMarkdown(sinkRegistry()))
	return err
}
