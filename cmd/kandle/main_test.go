package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

// asKandleEnv makes the test binary behave as the kandle binary.
//
// The crash and fault tests need kandle as separate processes (SIGKILL and
// SIGSTOP must hit a whole process, not a goroutine). Instead of building a
// second binary with `go build` (slow, and it needs the toolchain at test
// time), TestMain re-executes the test binary itself: with this variable set
// it runs kandle's main on its arguments and never reaches the tests. The
// child therefore is exactly the code under test, including any -race or
// -cover instrumentation of the parent.
const asKandleEnv = "KANDLE_TEST_AS_KANDLE"

func TestMain(m *testing.M) {
	if os.Getenv(asKandleEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// The AWS SDK's default credential chain of every kandle run these
	// tests start (in process or as a child) reads static test keys from
	// the environment, as an operator would point it at an emulator. They
	// are set once here rather than per test with t.Setenv, which a
	// parallel test may not call.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "true"} {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	// The tests marked testkit.WallClockTest mostly wait for the wall clock
	// (real-time input, paced backlogs, session and transaction timeouts,
	// idle_timeout, silence due times) with servers and kandle processes of
	// their own; two of them at once keep less than two thirds of a core
	// busy, so four run at once.
	if err := testkit.WallClockParallel(4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
