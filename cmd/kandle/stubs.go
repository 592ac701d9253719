package main

import (
	"context"
	"errors"
)

func cmdTables(ctx context.Context, e *env, args []string) error  { return errors.New("todo") }
func cmdQuery(ctx context.Context, e *env, args []string) error   { return errors.New("todo") }
