package kinesis

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// Special checkpoint values stored in a lease.
const (
	// TrimHorizon means "start at the oldest record of the shard".
	TrimHorizon = "TRIM_HORIZON"
	// Latest means "start after the newest record at the time of opening".
	Latest = "LATEST"
	// ShardEnd marks a shard that was closed and fully read.
	ShardEnd = "SHARD_END"
)

// ErrLeaseLost is returned by Lease.Checkpoint (and wrapped by other calls)
// when another owner took the lease or it expired. Stop using the shard.
var ErrLeaseLost = errors.New("kinesis: lease lost")

// Handler receives the shards this instance owns. Calls for one shard are
// sequential; different shards run concurrently.
//
// Every Open (successful or not) is followed by End or Lost. Lost can also
// follow End when the SHARD_END checkpoint after it could not be written;
// another instance then reads the shard's tail again and calls End there.
type Handler interface {
	// Open is called when this instance takes a shard (parents, if any, are
	// fully consumed and checkpointed SHARD_END before a child is opened). It
	// returns the position to resume after: the handler may know a newer
	// position than the lease checkpoint (it keeps its own state); "" means
	// use the lease checkpoint.
	Open(ctx context.Context, s Shard) (resumeAfter string, err error)
	// Records delivers one non-empty batch (a GetRecords response, or a
	// SubscribeToShard event with enhanced fan-out), in order.
	Records(ctx context.Context, s Shard, b Batch) error
	// End is called when the shard is closed and fully read (SHARD_END);
	// children are listed. After End returns nil the consumer checkpoints
	// SHARD_END and releases the lease.
	End(ctx context.Context, s Shard, children []string) error
	// Lost is called when the lease was lost (stolen, expired, shutdown, or
	// a handler error); stop using the shard.
	Lost(s Shard)
}

// PositionHandler is what a Handler may implement to learn how far behind
// the tip of a shard it is: Position is called after every read of the
// shard, also one that returned no records, before its records (if any) go
// to Records. millisBehind 0 means the read reached the tip when it was
// served. A read that is slow, failing or throttled calls nothing, so a
// handler must not take an old "at the tip" for a current one.
type PositionHandler interface {
	Position(s Shard, millisBehind int64)
}

// Shard is one shard handed to a Handler. Lease is nil in ReadRange.
type Shard struct {
	ID      string
	Parents []string
	Lease   *Lease
	// Listed, when set (live consumers), reports whether the latest shard
	// listing showed the shard open, and how old that listing is. A shard
	// closed by a split or merge gets no more records: its keys go on in
	// its children, which may be read before its end is seen.
	Listed func() (open bool, age time.Duration)
}

// Record is one Kinesis record.
type Record struct {
	Seq          string
	PartitionKey string
	Data         []byte
	Arrival      time.Time
}

// Batch is the content of one GetRecords response or SubscribeToShard event.
type Batch struct {
	Records            []Record
	MillisBehindLatest int64
}

// KinesisAPI is the part of *kinesis.Client the consumer and ReadRange use.
type KinesisAPI interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

// FanOutAPI is the part of *kinesis.Client that enhanced fan-out adds to
// KinesisAPI (ConsumerConfig.EnhancedFanOut).
type FanOutAPI interface {
	DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error)
	RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, opts ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error)
	SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, opts ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error)
}

// PutRecordsAPI is the part of *kinesis.Client the Sink uses.
type PutRecordsAPI interface {
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// DynamoAPI is the part of *dynamodb.Client the lease table uses.
type DynamoAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}
