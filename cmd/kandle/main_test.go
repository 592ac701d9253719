package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
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
	os.Exit(m.Run())
}
