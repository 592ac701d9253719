package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
)

// runNaive is the consumer a developer writes without a framework: one
// goroutine polls, decodes each trade with encoding/json, updates the
// symbol's candles in a map and produces every closed candle as JSON; offsets
// are committed by the client (at least once, state only in memory).
func runNaive(ctx context.Context, seeds []string, group string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("trades"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	out := group + ".candles"
	if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: out, Partitions: 1}}); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	state := map[string]*symbolState{}
	var firstErr error
	emit := func(c *ohlcv) {
		v, err := json.Marshal(c)
		if err != nil {
			firstErr = err
			return
		}
		cl.Produce(ctx, &kgo.Record{Topic: out, Key: []byte(c.Symbol), Value: v}, nil)
	}
	var t trade
	for seen := 0; seen < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			seen++
			t = trade{}
			if err := json.Unmarshal(r.Value, &t); err != nil {
				continue
			}
			s := state[t.Symbol]
			if s == nil {
				s = new(symbolState)
				state[t.Symbol] = s
			}
			if err := s.update(&t, emit); err != nil {
				continue
			}
		}
		if firstErr != nil {
			return firstErr
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return cl.CommitUncommittedOffsets(ctx)
}
