package main

import (
	"context"
	"errors"
)

func cmdTest(ctx context.Context, e *env, args []string) error { return errors.New("todo") }
