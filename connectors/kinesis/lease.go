package kinesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kandle/kandle/internal/clock"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Lease table attribute names (one item per shard, as in the KCL).
const (
	attrShard      = "shard_id"
	attrOwner      = "owner"
	attrCounter    = "lease_counter"
	attrCheckpoint = "checkpoint"
	attrMeta       = "checkpoint_meta" // what the handler recorded with its checkpoint (CheckpointMeta)
	attrParents    = "parents"
	attrRenewal    = "last_renewal" // informational only: expiry never reads it
)

// leaseItem is one lease as read from the table.
type leaseItem struct {
	ShardID    string
	Owner      string
	Counter    int64
	Checkpoint string
	Meta       string
	Parents    []string
}

// Lease is this instance's hold on one shard. Its methods are safe for
// concurrent use; renewals and checkpoints are serialized so that neither
// fences the other.
type Lease struct {
	t       *leaseTable
	shardID string
	owner   string

	mu         sync.Mutex
	counter    int64
	renewed    time.Time // local clock, last successful write
	checkpoint string
	meta       string
	lost       bool
}

// ShardID returns the leased shard.
func (l *Lease) ShardID() string { return l.shardID }

// Owner returns the owner name this instance writes into the table.
func (l *Lease) Owner() string { return l.owner }

// LastCheckpoint returns the checkpoint as last read or written.
func (l *Lease) LastCheckpoint() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkpoint
}

// Checkpoint records seq (a sequence number, TrimHorizon or ShardEnd) as the
// position to resume after. It is a conditional write on owner and lease
// counter: if another instance took the lease it returns ErrLeaseLost and the
// caller must stop using the shard. A checkpoint also counts as a renewal.
func (l *Lease) Checkpoint(ctx context.Context, seq string) error {
	if seq == "" {
		return errors.New("kinesis: checkpoint needs a sequence number")
	}
	return l.write(ctx, "SET #cp = :cp, #ren = :now ADD #cnt :one",
		map[string]types.AttributeValue{":cp": &types.AttributeValueMemberS{Value: seq}},
		func() { l.checkpoint = seq })
}

// LastMeta returns what the handler last recorded with a checkpoint
// (CheckpointMeta), as read when the lease was taken or last written.
func (l *Lease) LastMeta() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.meta
}

// CheckpointMeta is Checkpoint that also records meta, a string of the
// handler's own (kandle: where the shard's last changelog snapshot
// starts), which the next owner reads with LastMeta.
func (l *Lease) CheckpointMeta(ctx context.Context, seq, meta string) error {
	if seq == "" {
		return errors.New("kinesis: checkpoint needs a sequence number")
	}
	return l.write(ctx, "SET #cp = :cp, #md = :md, #ren = :now ADD #cnt :one",
		map[string]types.AttributeValue{":cp": &types.AttributeValueMemberS{Value: seq}, ":md": &types.AttributeValueMemberS{Value: meta}},
		func() { l.checkpoint, l.meta = seq, meta })
}

// renew bumps the counter so observers see the lease alive.
func (l *Lease) renew(ctx context.Context) error {
	return l.write(ctx, "SET #ren = :now ADD #cnt :one", nil, nil)
}

// release clears the owner so another instance can take the lease at once.
func (l *Lease) release(ctx context.Context) error {
	err := l.write(ctx, "SET #ren = :now REMOVE #own ADD #cnt :one", nil, nil)
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	return err
}

// finish checkpoints SHARD_END and clears the owner in one write.
func (l *Lease) finish(ctx context.Context) error {
	err := l.write(ctx, "SET #cp = :cp, #ren = :now REMOVE #own ADD #cnt :one",
		map[string]types.AttributeValue{":cp": &types.AttributeValueMemberS{Value: ShardEnd}},
		func() { l.checkpoint = ShardEnd })
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	return err
}

// expired reports whether the lease went unrenewed for a lease duration.
func (l *Lease) expired(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost || now.Sub(l.renewed) >= l.t.duration
}

// isLost reports whether a write found the lease taken.
func (l *Lease) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

func (l *Lease) write(ctx context.Context, update string, vals map[string]types.AttributeValue, onOK func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return fmt.Errorf("shard %s: %w", l.shardID, ErrLeaseLost)
	}
	names := map[string]string{"#own": attrOwner, "#cnt": attrCounter, "#ren": attrRenewal}
	if vals == nil {
		vals = map[string]types.AttributeValue{}
	}
	if _, ok := vals[":cp"]; ok {
		names["#cp"] = attrCheckpoint
	}
	if _, ok := vals[":md"]; ok {
		names["#md"] = attrMeta
	}
	vals[":o"] = &types.AttributeValueMemberS{Value: l.owner}
	vals[":one"] = num(1)
	vals[":now"] = num(l.t.clock.Now().UnixMilli())
	ctx, cancel := l.t.callCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		vals[":c"] = num(l.counter)
		_, err := l.t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &l.t.name,
			Key:                       l.t.key(l.shardID),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       aws.String("#own = :o AND #cnt = :c"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
		})
		if err == nil {
			break
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return fmt.Errorf("kinesis: lease write for shard %s in table %s: %w", l.shardID, l.t.name, err)
		}
		// An earlier write that reported an error (timeout, cancel) may
		// have landed and moved the counter. Only this owner moves the
		// counter while the owner field names it, so adopt it and retry once.
		if attempt == 0 {
			if it, gerr := l.t.get(ctx, l.shardID); gerr == nil && it.Owner == l.owner && it.Counter > l.counter {
				l.counter = it.Counter
				continue
			}
		}
		l.lost = true
		return fmt.Errorf("shard %s: %w", l.shardID, ErrLeaseLost)
	}
	l.counter++
	l.renewed = l.t.clock.Now()
	if onOK != nil {
		onOK()
	}
	return nil
}

// leaseTable wraps the DynamoDB lease table.
type leaseTable struct {
	db       DynamoAPI
	name     string
	duration time.Duration
	clock    clock.Clock
	// ns, when set, is the namespace of this consumer's leases: their
	// items are keyed ns/<shard id>, so consumers of other namespaces
	// sharing the table each hold every shard. Empty: items are keyed by
	// the bare shard id (shard ids never contain '/').
	ns string
}

// itemKey is the table key of shard id's lease.
func (t *leaseTable) itemKey(id string) string {
	if t.ns == "" {
		return id
	}
	return t.ns + "/" + id
}

// key is the DynamoDB key of shard id's lease.
func (t *leaseTable) key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrShard: &types.AttributeValueMemberS{Value: t.itemKey(id)}}
}

// shardOf returns the shard id of a table key, and whether the item is one
// of this namespace's leases.
func (t *leaseTable) shardOf(key string) (string, bool) {
	if t.ns == "" {
		return key, !strings.Contains(key, "/")
	}
	return strings.CutPrefix(key, t.ns+"/")
}

// decode reads one item of this namespace (ok false: another namespace's).
func (t *leaseTable) decode(m map[string]types.AttributeValue) (leaseItem, bool) {
	it := decodeLease(m)
	id, ok := t.shardOf(it.ShardID)
	it.ShardID = id
	return it, ok
}

// callCtx bounds one DynamoDB call by the lease duration but does not let a
// cancel abort it mid-flight: an aborted conditional write leaves its outcome
// unknown (and dynalite dies on aborted requests). Loops still check ctx
// between calls.
func (t *leaseTable) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(t.duration, time.Second))
}

// ensure creates the table (PAY_PER_REQUEST) if missing and waits until it is active.
func (t *leaseTable) ensure(ctx context.Context, poll time.Duration) error {
	for created := false; ; {
		cctx, cancel := t.callCtx(ctx)
		out, err := t.db.DescribeTable(cctx, &dynamodb.DescribeTableInput{TableName: &t.name})
		cancel()
		var nf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &nf) && !created:
			cctx, cancel := t.callCtx(ctx)
			_, err = t.db.CreateTable(cctx, &dynamodb.CreateTableInput{
				TableName:            &t.name,
				BillingMode:          types.BillingModePayPerRequest,
				AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrShard), AttributeType: types.ScalarAttributeTypeS}},
				KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrShard), KeyType: types.KeyTypeHash}},
			})
			cancel()
			var inUse *types.ResourceInUseException
			if err != nil && !errors.As(err, &inUse) {
				return fmt.Errorf("kinesis: create lease table %s (check DynamoDB endpoint and permissions): %w", t.name, err)
			}
			created = true
		case errors.As(err, &nf):
		case err != nil:
			return fmt.Errorf("kinesis: describe lease table %s: %w", t.name, err)
		case out.Table != nil && out.Table.TableStatus == types.TableStatusActive:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kinesis: waiting for lease table %s: %w", t.name, context.Cause(ctx))
		case <-time.After(poll):
		}
	}
}

// scan reads every lease (strongly consistent).
func (t *leaseTable) scan(ctx context.Context) ([]leaseItem, error) {
	var items []leaseItem
	in := &dynamodb.ScanInput{TableName: &t.name, ConsistentRead: aws.Bool(true)}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kinesis: scan lease table %s: %w", t.name, context.Cause(ctx))
		}
		cctx, cancel := t.callCtx(ctx)
		out, err := t.db.Scan(cctx, in)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kinesis: scan lease table %s: %w", t.name, err)
		}
		for _, m := range out.Items {
			if it, ok := t.decode(m); ok {
				items = append(items, it)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// get reads one lease (strongly consistent).
func (t *leaseTable) get(ctx context.Context, shardID string) (leaseItem, error) {
	ctx, cancel := t.callCtx(ctx)
	defer cancel()
	out, err := t.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.key(shardID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return leaseItem{}, fmt.Errorf("kinesis: read lease for shard %s: %w", shardID, err)
	}
	it, _ := t.decode(out.Item)
	return it, nil
}

// create adds a lease for a new shard unless one exists.
func (t *leaseTable) create(ctx context.Context, shardID string, parents []string, checkpoint string) error {
	item := map[string]types.AttributeValue{
		attrShard:      &types.AttributeValueMemberS{Value: t.itemKey(shardID)},
		attrCounter:    num(0),
		attrCheckpoint: &types.AttributeValueMemberS{Value: checkpoint},
	}
	if len(parents) > 0 {
		item[attrParents] = &types.AttributeValueMemberSS{Value: parents}
	}
	ctx, cancel := t.callCtx(ctx)
	defer cancel()
	_, err := t.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           &t.name,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(" + attrShard + ")"),
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("kinesis: create lease for shard %s: %w", shardID, err)
	}
	return nil
}

// deleteFinished removes the lease of a shard read to its end, only if it
// still says SHARD_END.
func (t *leaseTable) deleteFinished(ctx context.Context, shardID string) error {
	ctx, cancel := t.callCtx(ctx)
	defer cancel()
	_, err := t.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 &t.name,
		Key:                       t.key(shardID),
		ConditionExpression:       aws.String("#cp = :end"),
		ExpressionAttributeNames:  map[string]string{"#cp": attrCheckpoint},
		ExpressionAttributeValues: map[string]types.AttributeValue{":end": &types.AttributeValueMemberS{Value: ShardEnd}},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("kinesis: delete finished lease of shard %s: %w", shardID, err)
	}
	return nil
}

// take claims a lease observed as it, conditional on its counter not having
// moved since. It returns ErrLeaseLost when someone else moved first.
func (t *leaseTable) take(ctx context.Context, it leaseItem, owner string) (*Lease, error) {
	ctx, cancel := t.callCtx(ctx)
	defer cancel()
	out, err := t.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &t.name,
		Key:                 t.key(it.ShardID),
		UpdateExpression:    aws.String("SET #own = :o, #ren = :now ADD #cnt :one"),
		ConditionExpression: aws.String("#cnt = :c"),
		ExpressionAttributeNames: map[string]string{
			"#own": attrOwner, "#cnt": attrCounter, "#ren": attrRenewal,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":o": &types.AttributeValueMemberS{Value: owner}, ":c": num(it.Counter),
			":one": num(1), ":now": num(t.clock.Now().UnixMilli()),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return nil, fmt.Errorf("take shard %s: %w", it.ShardID, ErrLeaseLost)
		}
		return nil, fmt.Errorf("kinesis: take lease for shard %s: %w", it.ShardID, err)
	}
	now, _ := t.decode(out.Attributes)
	return &Lease{t: t, shardID: it.ShardID, owner: owner, counter: now.Counter,
		renewed: t.clock.Now(), checkpoint: now.Checkpoint, meta: now.Meta}, nil
}

func decodeLease(m map[string]types.AttributeValue) leaseItem {
	var it leaseItem
	if v, ok := m[attrShard].(*types.AttributeValueMemberS); ok {
		it.ShardID = v.Value
	}
	if v, ok := m[attrOwner].(*types.AttributeValueMemberS); ok {
		it.Owner = v.Value
	}
	if v, ok := m[attrCounter].(*types.AttributeValueMemberN); ok {
		it.Counter, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	if v, ok := m[attrCheckpoint].(*types.AttributeValueMemberS); ok {
		it.Checkpoint = v.Value
	}
	if v, ok := m[attrMeta].(*types.AttributeValueMemberS); ok {
		it.Meta = v.Value
	}
	if v, ok := m[attrParents].(*types.AttributeValueMemberSS); ok {
		it.Parents = v.Value
	}
	return it
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
