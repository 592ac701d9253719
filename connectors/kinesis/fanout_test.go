package kinesis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// flakyFanOut refuses SubscribeToShard in a fixed pattern: throttled, still
// in use, then one call that goes through.
type flakyFanOut struct {
	FanOutAPI
	mu               sync.Mutex
	calls            int
	throttled, inUse int
}

func (f *flakyFanOut) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	f.mu.Lock()
	f.calls++
	switch f.calls % 3 {
	case 1:
		f.throttled++
		f.mu.Unlock()
		return nil, &types.LimitExceededException{Message: aws.String("injected")}
	case 2:
		f.inUse++
		f.mu.Unlock()
		return nil, &types.ResourceInUseException{Message: aws.String("injected")}
	}
	f.mu.Unlock()
	return f.FanOutAPI.SubscribeToShard(ctx, in, opts...)
}

// Registering a stream consumer twice is idempotent; refused subscriptions
// (throttled, still in use) back off and retry, and a shard read with
// fan-out equals a polling read of it, record for record.
func testFanOutReaderRecovers(t *testing.T, e *env) {
	ctx := context.Background()
	e.put(t, 5, 0, 60)
	arn, err := ensureStreamConsumer(ctx, e.kin, e.stream, "recovers", quiet())
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ensureStreamConsumer(ctx, e.kin, e.stream, "recovers", quiet()); err != nil || again != arn {
		t.Fatalf("second registration: %q, %v; want %q", again, err, arn)
	}
	shards, err := listShards(ctx, e.kin, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyFanOut{FanOutAPI: e.kin}
	throttled, total := 0, 0
	errEnough := errors.New("all records read")
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		var clean, got []string
		poll := &shardReader{kin: e.kin, stream: e.stream, shard: id, limit: 1000, stopAtTip: true, log: quiet()}
		if _, err := poll.read(ctx, afterCheckpoint(TrimHorizon), func(b Batch) error {
			for _, r := range b.Records {
				clean = append(clean, r.Seq)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r := &fanOutReader{api: f, kin: e.kin, consumer: arn, stream: e.stream, shard: id, log: quiet(), onThrottle: func() { throttled++ }}
		_, err := r.read(ctx, afterCheckpoint(TrimHorizon), func(b Batch) error {
			for _, r := range b.Records {
				got = append(got, r.Seq)
			}
			if len(got) >= len(clean) {
				return errEnough
			}
			return nil
		})
		if !errors.Is(err, errEnough) || !slices.Equal(got, clean) {
			t.Fatalf("shard %s: fan-out read %d records (%v), polling %d", id, len(got), err, len(clean))
		}
		total += len(got)
	}
	if total != 60 || f.throttled == 0 || f.inUse == 0 || throttled != f.throttled {
		t.Fatalf("read %d records with %d throttled (%d counted) and %d in-use refusals", total, f.throttled, throttled, f.inUse)
	}
}
