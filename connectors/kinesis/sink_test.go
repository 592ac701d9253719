package kinesis

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// faultyPut wraps a real client. Its first call fails as a whole
// (throttled); in the next `partial` calls every third record is not sent
// and reported as failed, exactly like a partially throttled PutRecords.
type faultyPut struct {
	inner   PutRecordsAPI
	partial int

	mu      sync.Mutex
	calls   int
	sizes   []int
	dropped int
}

func (f *faultyPut) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.mu.Lock()
	f.calls++
	call := f.calls
	f.sizes = append(f.sizes, len(in.Records))
	f.mu.Unlock()
	if call == 1 {
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
	}
	if call > 1+f.partial {
		return f.inner.PutRecords(ctx, in, opts...)
	}
	fwd := *in
	fwd.Records = nil
	var idx []int
	for i, r := range in.Records {
		if i%3 != 1 {
			fwd.Records = append(fwd.Records, r)
			idx = append(idx, i)
		}
	}
	out, err := f.inner.PutRecords(ctx, &fwd, opts...)
	if err != nil {
		return nil, err
	}
	res := make([]types.PutRecordsResultEntry, len(in.Records))
	failed := int32(0)
	for i := range res {
		res[i] = types.PutRecordsResultEntry{ErrorCode: aws.String("ProvisionedThroughputExceededException"), ErrorMessage: aws.String("injected")}
	}
	for j, i := range idx {
		res[i] = out.Records[j]
	}
	for _, r := range res {
		if r.ErrorCode != nil {
			failed++
		}
	}
	f.mu.Lock()
	f.dropped += int(failed)
	f.mu.Unlock()
	return &kinesis.PutRecordsOutput{Records: res, FailedRecordCount: aws.Int32(failed)}, nil
}

// The sink survives a failed call and partial failures, never sends more
// than 500 records per call, and every candle reads back with each
// symbol's last copies in order.
func testSinkPartialFailures(t *testing.T, e *env) {
	ctx := context.Background()
	f := &faultyPut{inner: e.kin, partial: 2}
	s, err := NewSink(f, Config{Stream: e.stream}, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	const symbols, per = 7, 200
	var all []candle.Candle
	for i := 0; i < per; i++ {
		for k := 0; k < symbols; k++ {
			px := decimal.MustParse(strconv.Itoa(100+i) + ".1")
			all = append(all, candle.Candle{
				Symbol: "SYM" + strconv.Itoa(k), Timeframe: "1m", OpenTime: int64(i) * 60000, CloseTime: int64(i+1) * 60000,
				Open: px, High: px, Low: px, Close: px, Volume: decimal.MustParseSum("0.3"), QuoteVolume: decimal.MustParseSum("30.03"), Trades: 3,
			})
		}
	}
	for i := 0; i < len(all); i += 100 {
		if err := s.Write(ctx, all[i:min(i+100, len(all))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, all[:1]); err == nil {
		t.Fatal("write after close succeeded")
	}
	for _, n := range f.sizes {
		if n > 500 {
			t.Fatalf("a PutRecords call carried %d records", n)
		}
	}
	if f.dropped == 0 {
		t.Fatal("no failure was injected")
	}

	var back []candle.Candle
	if err := ReadRange(ctx, e.kin, e.stream, Position{TrimHorizon: true}, func(sh Shard, b Batch) error {
		for _, r := range b.Records {
			c, err := candle.ParseJSON(r.Data)
			if err != nil {
				return err
			}
			if c.Symbol != r.PartitionKey {
				t.Errorf("candle %s under partition key %s", c.Symbol, r.PartitionKey)
			}
			back = append(back, c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Keep each candle's last copy, in read order (one symbol lives on one shard).
	lastAt := map[string]int{}
	for i, c := range back {
		lastAt[c.Symbol+"/"+strconv.FormatInt(c.OpenTime, 10)] = i
	}
	if len(lastAt) != len(all) {
		t.Fatalf("read back %d distinct candles, want %d", len(lastAt), len(all))
	}
	prev := map[string]int64{}
	for i, c := range back {
		if lastAt[c.Symbol+"/"+strconv.FormatInt(c.OpenTime, 10)] != i {
			continue
		}
		if p, ok := prev[c.Symbol]; ok && c.OpenTime <= p {
			t.Fatalf("%s: open_time %d after %d", c.Symbol, c.OpenTime, p)
		}
		prev[c.Symbol] = c.OpenTime
		if want := all[int(c.OpenTime/60000)*symbols]; !c.Close.Equal(want.Close) || !c.QuoteVolume.Equal(want.QuoteVolume) {
			t.Fatalf("%s %d: close %s quote %s, want %s %s", c.Symbol, c.OpenTime, c.Close, c.QuoteVolume, want.Close, want.QuoteVolume)
		}
	}
	t.Logf("%d PutRecords calls, %d records injected as failed, %d copies read for %d candles",
		f.calls, f.dropped, len(back), len(all))
}
