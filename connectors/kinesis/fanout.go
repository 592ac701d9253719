package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// Enhanced fan-out (EFO): the stream pushes each shard's records to a
// registered stream consumer over a SubscribeToShard event stream, with
// its own 2 MB/s per shard instead of the 2 MB/s and 5 GetRecords calls
// per second that all polling readers of a shard share.

// fanOutIdle ends a subscription that has been silent this long: AWS sends
// an event every few seconds even when there is no data, so silence means
// a dead connection. The next subscription continues where it stopped.
const fanOutIdle = 30 * time.Second

// fanOutReader reads one shard with SubscribeToShard. It hands out the same
// Batches and readResult as shardReader, so Handler, checkpoints and
// resharding cannot tell the two apart.
type fanOutReader struct {
	api      FanOutAPI
	kin      KinesisAPI // GetRecords, only to confirm SHARD_END (see confirmEnd)
	consumer string     // consumer ARN
	stream   string
	shard    string
	log      *slog.Logger
	// closed reports whether the latest shard listing showed the shard closed.
	closed      func() bool
	onThrottle  func()
	onSubscribe func()        // a subscription delivered its first event
	onBatch     func(b Batch) // metrics
	maxEvents   int           // tests: end each subscription after this many events, as AWS does after 5 minutes
}

// read delivers batches from start until SHARD_END, ctx ends or deliver
// fails. Each subscription continues after the ContinuationSequenceNumber
// of the previous one's last event, which is how AWS says to resume.
func (r *fanOutReader) read(ctx context.Context, start startPos, deliver func(Batch) error) (readResult, error) {
	st := &fanOutState{pos: start}
	failures, hard := 0, 0
	for {
		res, events, err := r.subscribe(ctx, st, deliver)
		if err == nil && res.ended {
			return res, nil
		}
		if ctx.Err() != nil {
			return readResult{}, context.Cause(ctx)
		}
		if st.delivering {
			return readResult{}, err // the Handler's error, already wrapped
		}
		if events > 0 {
			failures, hard = 0, 0
			if err == nil { // AWS ended the subscription (5 minutes) or it went silent: renew it at once
				continue
			}
		}
		failures++
		switch {
		case err == nil: // ended before its first event: renew it, but not in a tight loop
		case isInUse(err):
			// The shard's previous subscriber (this instance before a
			// resubscribe, or the lease's previous owner) still holds it;
			// AWS hands it over after 5 seconds.
			r.log.Debug("kinesis: shard subscription still in use, waiting", "shard", r.shard, "err", err)
		case isThrottle(err):
			if r.onThrottle != nil {
				r.onThrottle()
			}
		default:
			if hard++; hard >= maxConsecutiveErrors {
				return readResult{}, fmt.Errorf("kinesis: SubscribeToShard on %s/%s failed %d times: %w", r.stream, r.shard, hard, err)
			}
			r.log.Warn("kinesis: SubscribeToShard failed, retrying", "stream", r.stream, "shard", r.shard, "from", st.pos, "err", err)
		}
		if err := sleep(ctx, backoff(failures)); err != nil {
			return readResult{}, err
		}
	}
}

// fanOutState is a read's position across subscriptions.
type fanOutState struct {
	pos        startPos // where the next subscription starts
	last       string   // last delivered sequence number
	delivering bool     // the error came from deliver
}

// resume is the position right after everything delivered so far: after
// the last record, or where the subscriptions got to without any.
func (st *fanOutState) resume() startPos {
	if st.last == "" {
		return st.pos
	}
	return startPos{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: st.last}
}

// subscribe runs one subscription until it ends. It reports SHARD_END in
// res, and how many events arrived.
func (r *fanOutReader) subscribe(ctx context.Context, st *fanOutState, deliver func(Batch) error) (res readResult, events int, err error) {
	out, err := r.api.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: &r.consumer, ShardId: &r.shard, StartingPosition: st.pos.startingPosition(),
	}, subscribeOptions)
	if err != nil {
		return readResult{}, 0, err
	}
	stream := out.GetStream()
	defer stream.Close()
	watchdog := time.NewTimer(fanOutIdle)
	defer watchdog.Stop()
	for r.maxEvents <= 0 || events < r.maxEvents {
		var ev types.SubscribeToShardEventStream
		var ok bool
		select {
		case <-ctx.Done():
			return readResult{}, events, context.Cause(ctx)
		case <-watchdog.C:
			r.log.Info("kinesis: shard subscription silent, renewing it", "shard", r.shard, "silent_for", fanOutIdle)
			return readResult{}, events, nil
		case ev, ok = <-stream.Events():
		}
		if !ok {
			return readResult{}, events, stream.Err() // nil: the service ended it
		}
		e, isEvent := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
		if !isEvent {
			continue // an event type this SDK does not know
		}
		if events++; events == 1 && r.onSubscribe != nil {
			r.onSubscribe() // counted once it delivers: an emulator's refusal also answers 200
		}
		if res, done, err := r.handle(ctx, st, e.Value, deliver); done || err != nil {
			return res, events, err
		}
		watchdog.Reset(fanOutIdle) // after the Handler: its time is not the stream's silence
	}
	return readResult{}, events, nil
}

// handle delivers one event and reports whether the shard ended.
func (r *fanOutReader) handle(ctx context.Context, st *fanOutState, ev types.SubscribeToShardEvent, deliver func(Batch) error) (readResult, bool, error) {
	b := Batch{MillisBehindLatest: aws.ToInt64(ev.MillisBehindLatest), Records: toRecords(ev.Records)}
	if r.onBatch != nil {
		r.onBatch(b) // empty events too: they say whether the shard is caught up
	}
	if len(b.Records) > 0 {
		if err := deliver(b); err != nil {
			st.delivering = true
			return readResult{}, false, err
		}
		st.last = b.Records[len(b.Records)-1].Seq
	}
	if ev.ContinuationSequenceNumber == nil { // SHARD_END: the service lists the children
		res := readResult{ended: true}
		for _, c := range ev.ChildShards {
			res.children = append(res.children, aws.ToString(c.ShardId))
		}
		return res, true, nil
	}
	st.pos = startPos{typ: types.ShardIteratorTypeAfterSequenceNumber, seq: *ev.ContinuationSequenceNumber}
	if len(b.Records) == 0 && b.MillisBehindLatest == 0 && r.closed != nil && r.closed() {
		return r.confirmEnd(ctx, st)
	}
	return readResult{}, false, nil
}

// errMoreRecords stops confirmEnd's probe at the first record.
var errMoreRecords = errors.New("kinesis: closed shard has records left")

// confirmEnd asks GetRecords whether a closed, caught-up shard is fully
// read. AWS ends a closed shard's subscription with a null
// ContinuationSequenceNumber and its ChildShards, but kinesis-mock never
// does: its subscriptions on a closed shard go on sending empty events.
// GetRecords from right after the last delivered record answers exactly:
// no records and no next iterator is SHARD_END (with ChildShards where the
// service sends them). Records left means the subscription delivers them.
func (r *fanOutReader) confirmEnd(ctx context.Context, st *fanOutState) (readResult, bool, error) {
	probe := &shardReader{kin: r.kin, stream: r.stream, shard: r.shard, limit: 1, stopAtTip: true, log: r.log, onThrottle: r.onThrottle}
	res, err := probe.read(ctx, st.resume(), func(Batch) error { return errMoreRecords })
	switch {
	case err == nil:
		return res, res.ended, nil
	case errors.Is(err, errMoreRecords):
		return readResult{}, false, nil
	case ctx.Err() != nil:
		return readResult{}, false, context.Cause(ctx)
	default:
		r.log.Warn("kinesis: could not check whether closed shard is fully read; will check again", "shard", r.shard, "err", err)
		return readResult{}, false, nil
	}
}

// subscribeOptions are SubscribeToShard's per-call client options: the
// initial-response shim, and a protocol instance of its own. The SDK's
// event stream codec (smithy-go 1.28) keeps decoding scratch state in the
// protocol that all calls of a client share, unsynchronized, so concurrent
// subscriptions would race on it (go test -race reports it).
func subscribeOptions(o *kinesis.Options) {
	withInitialResponseShim(o)
	o.Protocol = awsjson.New11(schemas.Kinesis_20131202)
}

// startingPosition maps p to SubscribeToShard's StartingPosition.
func (p startPos) startingPosition() *types.StartingPosition {
	sp := &types.StartingPosition{Type: p.typ}
	switch p.typ {
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		sp.SequenceNumber = aws.String(p.seq)
	case types.ShardIteratorTypeAtTimestamp:
		sp.Timestamp = aws.Time(p.ts)
	}
	return sp
}
