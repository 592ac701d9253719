package kinesis

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// flakyKinesis fails GetRecords in a fixed pattern: an expired iterator,
// then throttling, then two good calls, and so on.
type flakyKinesis struct {
	KinesisAPI
	mu                 sync.Mutex
	calls              int
	expired, throttled int
}

func (f *flakyKinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	switch f.calls % 4 {
	case 2:
		f.expired++
		return nil, &types.ExpiredIteratorException{Message: aws.String("injected")}
	case 3:
		f.throttled++
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
	}
	f.mu.Unlock() // not held across the network call
	defer f.mu.Lock()
	return f.KinesisAPI.GetRecords(ctx, in, opts...)
}

// Expired iterators resume right after the last delivered record and
// throttling backs off: the faulty read equals a clean one, record for record.
func testReaderRecovers(t *testing.T, e *env) {
	ctx := context.Background()
	e.put(t, 5, 0, 120)
	shards, err := listShards(ctx, e.kin, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	read := func(kin KinesisAPI, shard string) []string {
		var seqs []string
		r := &shardReader{kin: kin, stream: e.stream, shard: shard, limit: 7, stopAtTip: true, log: quiet()}
		if _, err := r.read(ctx, afterCheckpoint(TrimHorizon), func(b Batch) error {
			for _, rec := range b.Records {
				seqs = append(seqs, rec.Seq)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	flaky := &flakyKinesis{KinesisAPI: e.kin}
	total := 0
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		clean, faulty := read(e.kin, id), read(flaky, id)
		if !slices.Equal(clean, faulty) {
			t.Fatalf("shard %s: faulty read %d records, clean %d", id, len(faulty), len(clean))
		}
		total += len(clean)
	}
	if total != 120 || flaky.expired == 0 || flaky.throttled == 0 {
		t.Fatalf("read %d records with %d expired and %d throttled calls", total, flaky.expired, flaky.throttled)
	}
}
