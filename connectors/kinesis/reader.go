package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kandle/kandle/connectors/sinkkit"
)

// startPos says where a shard read begins.
type startPos struct {
	typ types.ShardIteratorType
	seq string
	ts  time.Time
}

func (p startPos) String() string {
	switch p.typ {
	case types.ShardIteratorTypeAtTimestamp:
		return string(p.typ) + " " + p.ts.UTC().Format(time.RFC3339Nano)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		return string(p.typ) + " " + p.seq
	}
	return string(p.typ)
}

// afterCheckpoint maps a stored checkpoint to a start position.
func afterCheckpoint(cp string) startPos {
	switch cp {
	case "", TrimHorizon:
		return startPos{typ: types.ShardIteratorTypeTrimHorizon}
	case Latest:
		return startPos{typ: types.ShardIteratorTypeLatest}
	}
	return startPos{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: cp}
}

// shardReader polls one shard with GetRecords.
type shardReader struct {
	kin        KinesisAPI
	stream     string
	shard      string
	poll       time.Duration
	limit      int32
	stopAtTip  bool // ReadRange: stop at the first empty, caught-up response
	log        *slog.Logger
	onThrottle func()
	onBatch    func(b Batch) // metrics
}

// readResult says how a read ended.
type readResult struct {
	ended    bool     // SHARD_END reached
	children []string // from ChildShards, when the service sent them
}

const maxConsecutiveErrors = 8

// read delivers batches from start until SHARD_END, ctx ends, deliver fails,
// or (stopAtTip) the shard is caught up.
func (r *shardReader) read(ctx context.Context, start startPos, deliver func(Batch) error) (readResult, error) {
	iter, err := r.iterator(ctx, start)
	if err != nil {
		return readResult{}, err
	}
	var last string // last delivered sequence number
	failures := 0
	for {
		out, err := r.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(r.limit)})
		if err != nil {
			if ctx.Err() != nil {
				return readResult{}, context.Cause(ctx)
			}
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				// Resume right after the last record handed out.
				pos := start
				if last != "" {
					pos = startPos{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: last}
				}
				if iter, err = r.iterator(ctx, pos); err != nil {
					return readResult{}, err
				}
				continue
			}
			failures++
			if isThrottle(err) {
				if r.onThrottle != nil {
					r.onThrottle()
				}
			} else if failures >= maxConsecutiveErrors {
				return readResult{}, fmt.Errorf("kinesis: GetRecords on %s/%s failed %d times: %w", r.stream, r.shard, failures, err)
			} else {
				r.log.Warn("kinesis: GetRecords failed, retrying", "stream", r.stream, "shard", r.shard, "err", err)
			}
			if err := sleep(ctx, backoff(failures)); err != nil {
				return readResult{}, err
			}
			continue
		}
		failures = 0
		b := Batch{MillisBehindLatest: aws.ToInt64(out.MillisBehindLatest), Records: toRecords(out.Records)}
		if r.onBatch != nil {
			r.onBatch(b) // empty batches too: they say whether the shard is caught up
		}
		if len(b.Records) > 0 {
			if err := deliver(b); err != nil {
				return readResult{}, err
			}
			last = b.Records[len(b.Records)-1].Seq
		}
		if out.NextShardIterator == nil {
			res := readResult{ended: true}
			for _, c := range out.ChildShards {
				res.children = append(res.children, aws.ToString(c.ShardId))
			}
			return res, nil
		}
		iter = out.NextShardIterator
		if len(b.Records) == 0 && b.MillisBehindLatest == 0 && r.stopAtTip {
			return readResult{}, nil
		}
		if b.MillisBehindLatest > 0 {
			continue // behind: poll again at once
		}
		if err := sleep(ctx, r.poll); err != nil {
			return readResult{}, err
		}
	}
}

// toRecords converts the SDK's records.
func toRecords(rs []types.Record) []Record {
	out := make([]Record, len(rs))
	for i, rec := range rs {
		out[i] = Record{
			Seq: aws.ToString(rec.SequenceNumber), PartitionKey: aws.ToString(rec.PartitionKey),
			Data: rec.Data, Arrival: aws.ToTime(rec.ApproximateArrivalTimestamp),
		}
	}
	return out
}

// iterator gets a shard iterator for p, retrying throttling.
func (r *shardReader) iterator(ctx context.Context, p startPos) (*string, error) {
	in := &kinesis.GetShardIteratorInput{StreamName: &r.stream, ShardId: &r.shard, ShardIteratorType: p.typ}
	switch p.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		in.StartingSequenceNumber = aws.String(p.seq)
	case types.ShardIteratorTypeAtTimestamp:
		in.Timestamp = aws.Time(p.ts)
	}
	for attempt := 1; ; attempt++ {
		out, err := r.kin.GetShardIterator(ctx, in)
		if err == nil {
			return out.ShardIterator, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !isThrottle(err) && attempt >= maxConsecutiveErrors {
			return nil, fmt.Errorf("kinesis: GetShardIterator %s on %s/%s: %w", p, r.stream, r.shard, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

func isThrottle(err error) bool {
	var pte *types.ProvisionedThroughputExceededException
	var lee *types.LimitExceededException
	var kms *types.KMSThrottlingException
	return errors.As(err, &pte) || errors.As(err, &lee) || errors.As(err, &kms)
}

// backoff is the connector's retry policy: sinkkit's jittered exponential
// backoff from 50ms (attempt 1) up to 5s.
func backoff(attempt int) time.Duration {
	return sinkkit.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}.Delay(attempt - 1)
}

func sleep(ctx context.Context, d time.Duration) error { return sinkkit.Sleep(ctx, d) }

// listShards returns every shard of the stream (paginated ListShards).
func listShards(ctx context.Context, kin KinesisAPI, stream string) ([]types.Shard, error) {
	var shards []types.Shard
	in := &kinesis.ListShardsInput{StreamName: &stream}
	for attempt := 1; ; {
		out, err := kin.ListShards(ctx, in)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if (isThrottle(err) || isInUse(err)) && attempt < maxConsecutiveErrors {
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return nil, err
				}
				attempt++
				continue
			}
			return nil, fmt.Errorf("kinesis: list shards of stream %q (does it exist?): %w", stream, err)
		}
		shards = append(shards, out.Shards...)
		if out.NextToken == nil {
			return shards, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

func isInUse(err error) bool {
	var riu *types.ResourceInUseException
	return errors.As(err, &riu)
}

// parentsOf lists a shard's parents.
func parentsOf(s types.Shard) []string {
	var p []string
	if s.ParentShardId != nil {
		p = append(p, *s.ParentShardId)
	}
	if s.AdjacentParentShardId != nil {
		p = append(p, *s.AdjacentParentShardId)
	}
	return p
}

// childrenOf lists the shards in shards whose parents include id.
func childrenOf(shards []types.Shard, id string) []string {
	var c []string
	for _, s := range shards {
		for _, p := range parentsOf(s) {
			if p == id {
				c = append(c, aws.ToString(s.ShardId))
			}
		}
	}
	return c
}
