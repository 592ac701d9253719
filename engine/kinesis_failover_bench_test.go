package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/connectors/kafka"
	kkin "github.com/kandle/kandle/connectors/kinesis"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
	"github.com/kandle/kandle/topology"
)

// kinesisFailoverTopology is failoverTopology on a one-shard Kinesis
// stream (the lease and poll settings of the Kinesis tests, so a stopped
// owner's shard is taken quickly; everything else as shipped).
const kinesisFailoverTopology = `
name: kfo
brokers: [%s]
metrics: ""
sources:
  trades:
    kind: kinesis
    partitions: 1
    kinesis: {stream: trades, endpoint: %s, dynamodb_endpoint: %s, lease_duration: 2s, poll_interval: 50ms}
processors:
  1m: {kind: candles, from: trades, timeframe: 1m, output: {topic: kfo.1m, partitions: 1}}
dead_letter: {topic: kfo.dlq}
`

// BenchmarkKinesisFailover is BenchmarkFailover for a Kinesis shard: what
// it costs a new owner to take a shard over, from the start of its restore
// to the first candle it outputs, with the state of 2,000 keys
// (KANDLE_KFAILOVER_KEYS) built from histories of 10k and 20k trades
// (KANDLE_KFAILOVER_HISTORY, comma separated). kinesis-local's puts slow
// down as its stream grows (50k trades were still being put after 20
// minutes), so the histories stay small; with 2,000 keys a shard still
// snapshots every few thousand changelog records. The first owner reads the whole history
// and stops (releasing its lease, whose last checkpoint names the shard's
// last snapshot); the new owner starts with an empty disk or with the
// first owner's. A trade put before the takeover closes every key's
// window, so the first output follows the restore.
//
// Reported as BenchmarkFailover: takeover-ms, restore-ms and the changelog
// records of the first restore, and restores (shard opens). With an empty
// disk the restore reads the last snapshot and what followed it, so
// takeover does not grow with the history.
func BenchmarkKinesisFailover(b *testing.B) {
	benchFailover(b, envInt(b, "KANDLE_KFAILOVER_KEYS", 2000), "KANDLE_KFAILOVER_HISTORY", "10000,20000", runKinesisFailover)
}

func runKinesisFailover(b *testing.B, keys, n int, keepDisk bool) takeover {
	// The timer runs through the setup (the figures are reported, not
	// timed): one run takes minutes, so `make bench` (-benchtime 2s) does
	// not repeat it to fill its bench time.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b.Setenv("AWS_ACCESS_KEY_ID", "test")
	b.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	b.Setenv("AWS_REGION", "us-east-1")
	kin, ddb := testkit.KinesisMock(b, "trades:1"), testkit.Dynalite(b)
	broker, err := kafka.StartDevBroker(kafka.WithListen("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	seeds := broker.Addrs()
	client, _, err := kkin.NewClients(ctx, "us-east-1", kin.URL(), ddb.URL())
	if err != nil {
		b.Fatal(err)
	}
	g, start, span := history(b, keys, n)
	put := func(batch []types.PutRecordsRequestEntry) {
		out, err := client.PutRecords(ctx, &awskinesis.PutRecordsInput{StreamName: aws.String("trades"), Records: batch})
		if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
			b.Fatalf("put records: %v (failed %d)", err, aws.ToInt32(out.FailedRecordCount))
		}
	}
	var batch []types.PutRecordsRequestEntry
	for {
		k, v, ok := g.Next()
		if !ok {
			break
		}
		batch = append(batch, types.PutRecordsRequestEntry{PartitionKey: aws.String(string(k)), Data: v})
		if len(batch) == 500 {
			put(batch)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		put(batch)
	}
	top, err := topology.Parse("kfo.yaml", fmt.Appendf(nil, kinesisFailoverTopology, seeds[0], kin.URL(), ddb.URL()), topology.Registry{})
	if err != nil {
		b.Fatal(err)
	}

	// The first owner reads the whole history, then stops.
	dirA := b.TempDir()
	regA := prometheus.NewRegistry()
	a, err := engine.New(top, engine.WithLogger(slog.New(slog.DiscardHandler)), engine.WithInstanceID("a"),
		engine.WithStateDir(dirA), engine.WithRegisterer(regA))
	if err != nil {
		b.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	for done := 0.0; done < float64(n); {
		select {
		case err := <-adone:
			b.Fatalf("the engine stopped before the end of the history: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		done = counter(b, regA, "kandle_records_total", "")
	}
	time.Sleep(time.Second) // the last batch's commit and checkpoint
	acancel()
	if err := <-adone; err != nil {
		b.Fatal(err)
	}

	// A read-committed consumer from the output's current end, and one trade
	// two minutes past the history, which closes every key's open window.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	checkProcessed(b, kadm.NewClient(cl), "kfo.dlq", "kfo.1m") // a dead-lettered history leaves no state to take over
	out := outputFromEnd(ctx, b, kadm.NewClient(cl), seeds, "kfo.1m")
	defer out.Close()
	ts := start.Add(span + 2*time.Minute).UnixMilli()
	put([]types.PutRecordsRequestEntry{{PartitionKey: aws.String("K000000"),
		Data: fmt.Appendf(nil, `{"symbol":"K000000","ts":%d,"price":"100","qty":"1","trade_id":%d}`, ts, 1<<40)}})

	// The new owner.
	dirB := b.TempDir()
	if keepDisk {
		dirB = dirA
	}
	return takeOver(ctx, b, top, dirB, out)
}
