// Command kandle runs OHLCV candle topologies over Kafka or Kinesis.
//
// Every subcommand has its own flags; `kandle help CMD` explains them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what commands share: where they print and how they log.
type env struct {
	stdout, stderr io.Writer
	log            *slog.Logger
	logLevel       *slog.LevelVar
	parseOnly      bool // stop every command right after its flags parsed (the docs' example check)
}

// errParsed ends a command whose flags parsed when env.parseOnly is set.
var errParsed = errors.New("flags parsed")

// parse parses a command's flags; with e.parseOnly it then stops the command.
func (e *env) parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if e.parseOnly {
		return errParsed
	}
	return nil
}

// parseNoArgs is parse for commands that take flags only: a leftover
// argument (often a topology file without -t) is an error, not ignored.
func (e *env) parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		hint := ""
		if strings.HasSuffix(fs.Arg(0), ".yaml") || strings.HasSuffix(fs.Arg(0), ".yml") {
			hint = fmt.Sprintf("; name the topology with -t %s", fs.Arg(0))
		}
		return fmt.Errorf("unexpected argument %q: kandle %s takes flags only%s (kandle help %s)", fs.Arg(0), fs.Name(), hint, fs.Name())
	}
	if e.parseOnly {
		return errParsed
	}
	return nil
}

func commands() []command {
	return []command{
		{"run", "run a topology as a member of its consumer groups (the deployed job)", cmdRun},
		{"validate", "check topology files and report every problem with file:line:col", cmdValidate},
		{"replay", "rebuild candles from a bounded range of the input, without joining any group", cmdReplay},
		{"plan", "show which processors keep, rebuild or drop their state when a topology file changes", cmdPlan},
		{"test", "run topology unit tests written in YAML (input records → expected candles)", cmdTest},
		{"gen", "generate synthetic trades to a topic or stdout", cmdGen},
		{"dev-broker", "run an in-process Kafka-protocol broker for local development", cmdDevBroker},
		{"demo", "dev broker + generator + the crypto topology, closed candles shown as a table", cmdDemo},
		{"offsets", "show per-partition offsets, lag and watermarks; reset a group to a time", cmdOffsets},
		{"tables", "create or update the DynamoDB tables a topology declares (tables apply)", cmdTables},
		{"query", "read candles back from a DynamoDB sink (latest, range, many symbols)", cmdQuery},
		{"serve", "candle API over hot and cold storage, live WebSocket stream and chart page", cmdServe},
		{"docs", "print the configuration reference generated from the component specs", cmdDocs},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(realMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runMain(ctx, args, stdout, stderr, false)
}

// runMain is realMain; with parseOnly every command stops once its flags
// parsed (exit 0) or failed to (exit 1), running nothing.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer, parseOnly bool) int {
	lv := new(slog.LevelVar)
	if s := os.Getenv("KANDLE_LOG_LEVEL"); s != "" {
		_ = lv.UnmarshalText([]byte(s))
	}
	e := &env{stdout: stdout, stderr: stderr, logLevel: lv, parseOnly: parseOnly,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" && len(args) == 1 {
		usage(stdout)
		return 0
	}
	name, rest := args[0], args[1:]
	if name == "help" {
		name, rest = args[1], []string{"-h"}
	}
	for _, c := range commands() {
		if c.name == name {
			err := c.run(ctx, e, rest)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp), errors.Is(err, errParsed):
				return 0
			case errors.Is(err, errQuiet):
				return 1
			}
			fmt.Fprintf(stderr, "kandle %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "kandle: unknown command %q%s\n\n", name, suggestCommand(name))
	usage(stderr)
	return 2
}

// errQuiet ends a command with exit status 1 after it printed its own report.
var errQuiet = errors.New("failed")

func usage(w io.Writer) {
	fmt.Fprintln(w, "kandle — OHLCV candles from trade streams, exactly once.")
	fmt.Fprintln(w, "\nUsage: kandle <command> [flags]   (kandle help <command> for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEnvironment: KANDLE_LOG_LEVEL=debug|info|warn|error sets the log level (default info).")
}

func suggestCommand(name string) string {
	for _, c := range commands() {
		if strings.HasPrefix(c.name, name) || strings.HasPrefix(name, c.name) {
			return fmt.Sprintf(" (did you mean %q?)", c.name)
		}
	}
	return ""
}

// newFlags returns a flag set whose -h output explains the command.
func newFlags(e *env, name, usageLine, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: kandle %s %s\n\n%s\n\nFlags:\n", name, usageLine, about)
		fs.PrintDefaults()
	}
	return fs
}
