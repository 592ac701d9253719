package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log"
	"os"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
)

// runGoka is the aggregation written the way Goka's documentation shows it:
// goka.DefineGroup with goka.Input of the trades topic and a goka.Persist
// group table holding each symbol's eight open candles (agg.go's symbolState,
// JSON), LevelDB storage (Goka's default) under a temporary directory, every
// closed candle emitted as JSON through goka.Output. Goka's defaults are kept
// (sarama's 1 s offset auto-commit, snappy, WaitForLocal acks) except what
// the bench needs to run: the stream is read from its start, the topics get
// replication factor 1 (the in-process broker has one node), and the group
// table is partitioned the way the trades are (franz-go's key hash), so that
// the table's changelog holds each symbol where Goka would recover it.
//
// The clock stops when the group has committed every input offset, the way
// kandle's stops (both read the group's lag through the admin API).
func runGoka(partitions int) func(ctx context.Context, seeds []string, group string, n int) error {
	return func(ctx context.Context, seeds []string, group string, n int) error {
		dir, err := os.MkdirTemp("", "peers-goka-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)

		out := group + ".candles"
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return err
		}
		defer cl.Close()
		if _, err := kafka.EnsureTopics(ctx, cl, []kafka.TopicSpec{{Name: out, Partitions: 1}}); err != nil {
			return fmt.Errorf("create %s: %w", out, err)
		}

		cfg := goka.DefaultConfig()
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest // the stream from its start
		tm := goka.NewTopicManagerConfig()
		tm.Table.Replication, tm.Stream.Replication = 1, 1
		hasher := keyHasher(int32(partitions))

		g := goka.DefineGroup(goka.Group(group),
			goka.Input("trades", rawCodec{}, func(gc goka.Context, msg any) {
				var t trade
				if err := json.Unmarshal(msg.([]byte), &t); err != nil {
					return // the naive peer skips undecodable trades too
				}
				s, _ := gc.Value().(*symbolState)
				if s == nil {
					s = new(symbolState)
				}
				if err := s.update(&t, func(c *ohlcv) { gc.Emit(goka.Stream(out), c.Symbol, c) }); err != nil {
					return
				}
				gc.SetValue(s)
			}),
			goka.Persist(jsonCodec[symbolState]{}),
			goka.Output(goka.Stream(out), jsonCodec[ohlcv]{}),
		)
		p, err := goka.NewProcessor(seeds, g,
			goka.WithStorageBuilder(storage.DefaultBuilder(dir)),
			goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithConfig(cfg, tm)),
			goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(cfg)),
			goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(cfg)),
			goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(cfg)),
			goka.WithHasher(hasher),
			goka.WithLogger(quietGoka()),
		)
		if err != nil {
			return fmt.Errorf("goka processor: %w", err)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		if err := waitCommitted(ctx, cl, []string{group}, done); err != nil {
			return err
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("goka processor stopped: %w", err)
		}
		return nil
	}
}

// rawCodec hands the callback the record's bytes (decoded there, like the
// naive peer does).
type rawCodec struct{}

func (rawCodec) Encode(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Decode(b []byte) (any, error) { return b, nil }

// jsonCodec is encoding/json for *T.
type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec[T]) Decode(b []byte) (any, error) {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, err
	}
	return v, nil
}

// keyHasher makes Goka place a key in the partition franz-go's default
// partitioner put it in (the trades were produced with franz-go): its
// "hash" is that partition, which sarama's hash partitioner keeps as is
// (p mod n = p).
func keyHasher(n int32) func() hash.Hash32 {
	return func() hash.Hash32 {
		return &partitionHash{n: n, part: kgo.StickyKeyPartitioner(nil).ForTopic("")}
	}
}

type partitionHash struct {
	n    int32
	part kgo.TopicPartitioner
	key  []byte
}

func (h *partitionHash) Write(b []byte) (int, error) { h.key = append(h.key, b...); return len(b), nil }
func (h *partitionHash) Sum(b []byte) []byte {
	s := h.Sum32()
	return append(b, byte(s>>24), byte(s>>16), byte(s>>8), byte(s))
}
func (h *partitionHash) Reset()         { h.key = h.key[:0] }
func (h *partitionHash) Size() int      { return 4 }
func (h *partitionHash) BlockSize() int { return 1 }
func (h *partitionHash) Sum32() uint32 {
	return uint32(h.part.Partition(&kgo.Record{Key: h.key}, int(h.n)))
}

// quietGoka discards Goka's informational log lines (the other contestants
// log errors only; Goka returns its errors from Run).
func quietGoka() goka.Logger { return log.New(io.Discard, "", 0) }
