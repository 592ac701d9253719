package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"

	"github.com/kandle/kandle/engine/topotest"
)

func cmdTest(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "test", "[-run REGEX] [-v] [FILE_test.yaml | DIR]...",
		"Runs topology unit tests written in YAML: input records per source partition, the candles each\n"+
			"processor must close and the dead letters expected. Tests run in process (no broker, no wall clock)\n"+
			"and report like go test. A DIR (default: the current directory) means every *_test.yaml in it.\n"+
			"The file format is described in `go doc github.com/kandle/kandle/engine/topotest`; examples are\n"+
			"testdata/topologies/*_test.yaml. Exits 1 if any test fails.")
	run := fs.String("run", "", "run only tests whose name (file_test.yaml/test name) matches this regular expression")
	verbose := fs.Bool("v", false, "print every test and every candle and dead letter it produced")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	opts := []topotest.Option{topotest.WithRegistry(sinkRegistry()), topotest.WithVerbose(*verbose)}
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		opts = append(opts, topotest.WithFilter(re))
	}
	targets := fs.Args()
	if len(targets) == 0 {
		targets = []string{"."}
	}
	var files []string
	for _, t := range targets {
		st, err := os.Stat(t)
		if err != nil {
			return fmt.Errorf("%w (name test files or directories holding *_test.yaml)", err)
		}
		if !st.IsDir() {
			files = append(files, t)
			continue
		}
		found, err := filepath.Glob(filepath.Join(t, "*_test.yaml"))
		if err != nil {
			return err
		}
		if len(found) == 0 {
			return fmt.Errorf("no *_test.yaml files in %s: write NAME_test.yaml next to the topology (see testdata/topologies/crypto_test.yaml)", t)
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	if !topotest.NewRunner(e.stdout, opts...).Run(files...).OK() {
		return errQuiet
	}
	return nil
}
