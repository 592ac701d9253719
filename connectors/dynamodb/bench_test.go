package dynamodb

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// BenchmarkSinkWrite measures Write+Flush throughput against dynalite (a
// Node emulator: the number bounds the sink's overhead, not DynamoDB's).
func BenchmarkSinkWrite(b *testing.B) {
	ctx := context.Background()
	dyn := testkit.Dynalite(b)
	cfg := historyConfig("bench", dyn.URL())
	cfg.Provision = false
	if _, err := Apply(ctx, rawClient(dyn.URL()), []TableSpec{cfg.Table}, false, WithLogger(quietLogger())); err != nil {
		b.Fatal(err)
	}
	h := newSink(b, cfg, nil)
	cs := genCandles([]string{"BTC", "ETH", "SOL", "ADA"}, []string{"1m"}, 250, 1) // 1000 distinct keys
	b.ResetTimer()
	start := time.Now()
	n := 0
	for i := 0; i < b.N; i++ {
		batch := cs[(i*100)%len(cs) : (i*100)%len(cs)+100]
		if err := h.sink.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		n += len(batch)
	}
	if err := h.sink.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "candles/s")
}

// BenchmarkSinkVsIdeal puts the sink next to what the emulator takes from an
// ideal client in the same run: the same items (built by the sink's own
// encoder, outside the clock), sent as BatchWriteItem requests of 25 by
// parallel writers with nothing else to do. The sink runs with the shipped
// max_in_flight; the ideal client with as many writers, and with 4× as many
// (what the store can take when the client is not the limit). Candles are
// written by PutItems conditional on their rev (BatchWriteItem takes no
// condition), so ideal/conditional_puts sends the same items that way from
// max_in_flight × 25 writers, as the sink does: the price of the condition
// is the distance between the batch and the put rows.
func BenchmarkSinkVsIdeal(b *testing.B) {
	ctx := context.Background()
	dyn := testkit.Dynalite(b)
	cs := genCandles([]string{"BTC", "ETH", "SOL", "ADA"}, []string{"1m", "5m"}, 500, 1) // 4000 distinct keys
	shipped := defaultMaxInFlight(b)
	b.Run(fmt.Sprintf("sink/in_flight=%d", shipped), func(b *testing.B) {
		cfg := historyConfig("bench_sink", dyn.URL())
		h := newSink(b, cfg, nil)
		var rate float64
		for range b.N {
			start := time.Now()
			for i := 0; i < len(cs); i += 500 {
				if err := h.sink.Write(ctx, cs[i:i+500]); err != nil {
					b.Fatal(err)
				}
			}
			if err := h.sink.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			rate = float64(len(cs)) / time.Since(start).Seconds()
		}
		b.ReportMetric(rate, "candles/s")
	})
	for _, writers := range []int{shipped, 4 * shipped} {
		b.Run(fmt.Sprintf("ideal/writers=%d", writers), func(b *testing.B) {
			cfg := historyConfig("bench_ideal", dyn.URL())
			h := newSink(b, cfg, nil) // provisions the table and encodes the items
			items := make([]types.WriteRequest, len(cs))
			for i := range cs {
				p, err := h.sink.candleItem(&cs[i])
				if err != nil {
					b.Fatal(err)
				}
				items[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: p.item}}
			}
			// The sink provisions the table on its first flush of something.
			if err := h.sink.Write(ctx, cs[:1]); err != nil {
				b.Fatal(err)
			}
			if err := h.sink.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			var rate float64
			for range b.N {
				rate = idealWrite(ctx, b, h.raw, cfg.Table.Name, items, writers)
			}
			b.ReportMetric(rate, "candles/s")
		})
	}
	b.Run(fmt.Sprintf("ideal/conditional_puts/writers=%d", shipped*maxBatch), func(b *testing.B) {
		cfg := historyConfig("bench_puts", dyn.URL())
		h := newSink(b, cfg, nil)
		if err := h.sink.Write(ctx, cs[:1]); err != nil { // provisions the table
			b.Fatal(err)
		}
		if err := h.sink.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		var rate float64
		for range b.N {
			next := make(chan *candle.Candle, len(cs))
			for i := range cs {
				next <- &cs[i]
			}
			close(next)
			start := time.Now()
			var wg sync.WaitGroup
			for range shipped * maxBatch {
				wg.Go(func() {
					for c := range next {
						p, err := h.sink.candleItem(c)
						if err == nil {
							_, err = h.raw.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(cfg.Table.Name), Item: p.item,
								ConditionExpression:       aws.String(revCondition),
								ExpressionAttributeNames:  map[string]string{"#rev": attrRev},
								ExpressionAttributeValues: map[string]types.AttributeValue{":rev": numAttr(int64(c.Rev))}})
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			rate = float64(len(cs)) / time.Since(start).Seconds()
		}
		b.ReportMetric(rate, "candles/s")
	})
}

// defaultMaxInFlight is max_in_flight as shipped (the spec's default).
func defaultMaxInFlight(b *testing.B) int {
	f, ok := reflect.TypeOf(Config{}).FieldByName("MaxInFlight")
	if !ok {
		b.Fatal("Config has no MaxInFlight")
	}
	n, err := strconv.Atoi(f.Tag.Get("default"))
	if err != nil {
		b.Fatalf("max_in_flight default: %v", err)
	}
	return n
}

// idealWrite sends items as BatchWriteItem requests of 25 from writers
// goroutines, resending unprocessed items, and returns items per second.
func idealWrite(ctx context.Context, b *testing.B, cl *dynamodb.Client, table string, items []types.WriteRequest, writers int) float64 {
	chunks := make(chan []types.WriteRequest, len(items)/25+1)
	for i := 0; i < len(items); i += 25 {
		chunks <- items[i:min(i+25, len(items))]
	}
	close(chunks)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reqs := range chunks {
				for len(reqs) > 0 {
					out, err := cl.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
					if err != nil {
						errs <- err
						return
					}
					reqs = out.UnprocessedItems[table]
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return float64(len(items)) / el.Seconds()
}
