package dynamodb

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
)

// The reads below serve the access patterns of docs/contract.md ("What the
// stores hold"). They need a pk built
// only from {symbol}, {timeframe} and {shard}, and a sort key that sorts by
// time ({open_time} or {ts} first), so that "latest" and "from..to" map to
// one Query per partition. With shards > 0 every shard's partition is
// queried and the results merged.

// Latest returns the newest candle of symbol and timeframe (Query with
// ScanIndexForward=false, Limit=1 per shard). ok is false when there is none.
func (r *Reader) Latest(ctx context.Context, symbol, tf string) (c candle.Candle, ok bool, err error) {
	pks, err := r.partitions(symbol, tf)
	if err != nil {
		return candle.Candle{}, false, err
	}
	for _, pk := range pks {
		items, err := r.query(ctx, r.keyCond(pk, nil), false, 1)
		if err != nil {
			return candle.Candle{}, false, err
		}
		for _, it := range items {
			got, err := itemCandle(it)
			if err != nil {
				return candle.Candle{}, false, fmt.Errorf("dynamodb Latest %s %s: %w", symbol, tf, err)
			}
			if !ok || got.OpenTime > c.OpenTime {
				c, ok = got, true
			}
		}
	}
	return c, ok, nil
}

// Range returns the candles of symbol and timeframe with open_time in
// [from, to), oldest first, following Query pagination.
func (r *Reader) Range(ctx context.Context, symbol, tf string, from, to int64) ([]candle.Candle, error) {
	return r.Page(ctx, symbol, tf, from, to, 0, false)
}

// LatestMany returns the newest candle of each symbol (symbols without one
// are absent). BatchGetItem needs exact keys and "the newest open_time" is
// not one, so this runs one Latest Query per symbol, MaxInFlight at a time.
func (r *Reader) LatestMany(ctx context.Context, symbols []string, tf string) (map[string]candle.Candle, error) {
	type res struct {
		c   candle.Candle
		ok  bool
		err error
	}
	results := make([]res, len(symbols))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(r.cfg.MaxInFlight, len(symbols)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(symbols) || ctx.Err() != nil {
					return
				}
				res := &results[i]
				res.c, res.ok, res.err = r.Latest(ctx, symbols[i], tf)
			}
		})
	}
	wg.Wait()
	out := make(map[string]candle.Candle, len(symbols))
	for i, res := range results {
		if res.err != nil {
			return nil, res.err
		}
		if res.ok {
			out[symbols[i]] = res.c
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dynamodb LatestMany: %w", err)
	}
	return out, nil
}

// ReadSharded returns the trades or readings of key (the {symbol} of the
// pk template) with ts in [from, to), read from every write shard and
// merged in sort key order. Without sharding it reads the one partition.
func (r *Reader) ReadSharded(ctx context.Context, key string, from, to int64) ([]candle.Trade, error) {
	if to <= from {
		return nil, nil
	}
	pks, err := r.partitions(key, "")
	if err != nil {
		return nil, err
	}
	type row struct {
		sk string
		tr candle.Trade
	}
	var rows []row
	for _, pk := range pks {
		items, err := r.query(ctx, r.keyCond(pk, &[2]int64{from, to}), true, 0)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			tr, err := itemTrade(it)
			if err != nil {
				return nil, fmt.Errorf("dynamodb ReadSharded %s: %w", key, err)
			}
			if tr.TS >= from && tr.TS < to {
				rows = append(rows, row{attrString(it[r.cfg.Table.SKAttribute]), tr})
			}
		}
	}
	numeric := r.cfg.Table.SKType == "N"
	sort.SliceStable(rows, func(i, j int) bool {
		if numeric {
			a, _ := strconv.ParseInt(rows[i].sk, 10, 64)
			b, _ := strconv.ParseInt(rows[j].sk, 10, 64)
			return a < b
		}
		return rows[i].sk < rows[j].sk
	})
	out := make([]candle.Trade, len(rows))
	for i := range rows {
		out[i] = rows[i].tr
	}
	return out, nil
}

// partitions renders the pk of every shard for symbol and timeframe.
func (t *table) partitions(symbol, tf string) ([]string, error) {
	for _, p := range t.pk.parts {
		switch p.ph {
		case phLiteral, phSymbol, phTimeframe, phShard:
		default:
			return nil, fmt.Errorf("dynamodb table %s: reads need a pk built from {symbol}, {timeframe} and {shard} only; pk %q has time or id placeholders, so query its partitions directly", t.cfg.Table.Name, t.pk.src)
		}
	}
	if !t.sk.leadingTime() {
		return nil, fmt.Errorf("dynamodb table %s: reads need a sort key that starts with {open_time} or {ts} (got %q)", t.cfg.Table.Name, t.sk.src)
	}
	n := max(t.cfg.Shards, 1)
	pks := make([]string, n)
	for i := range pks {
		pks[i] = t.pk.render(&vars{symbol: symbol, timeframe: tf, shard: i})
	}
	return pks, nil
}

// keyCond builds the key condition for partition pk, limited to the sort
// keys of times in [r[0], r[1]) when r is set.
func (t *table) keyCond(pk string, r *[2]int64) *dynamodb.QueryInput {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(t.cfg.Table.Name),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": t.cfg.Table.PKAttribute},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": strAttr(pk)},
	}
	if r == nil {
		return in
	}
	lo, hi := strconv.FormatInt(r[0], 10), strconv.FormatInt(r[1]-1, 10)
	in.KeyConditionExpression = aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi")
	in.ExpressionAttributeNames["#sk"] = t.cfg.Table.SKAttribute
	if t.cfg.Table.SKType == "N" {
		in.ExpressionAttributeValues[":lo"] = &types.AttributeValueMemberN{Value: lo}
		in.ExpressionAttributeValues[":hi"] = &types.AttributeValueMemberN{Value: hi}
	} else {
		// "{ts}#…" sorts after "{ts}" and before "{ts}\uffff".
		in.ExpressionAttributeValues[":lo"] = strAttr(lo)
		in.ExpressionAttributeValues[":hi"] = strAttr(hi + "\uffff")
	}
	return in
}

// SetConsistentReads makes the reads of Latest, Range, LatestMany and
// ReadSharded strongly consistent (index queries stay eventually consistent).
func (r *Reader) SetConsistentReads(on bool) { r.consistent.Store(on) }

// query runs in to the end (or to limit items when limit > 0), following
// LastEvaluatedKey and retrying transient errors.
func (t *table) query(ctx context.Context, in *dynamodb.QueryInput, forward bool, limit int32) ([]map[string]types.AttributeValue, error) {
	in.ScanIndexForward = aws.Bool(forward)
	if t.consistent.Load() && in.IndexName == nil {
		in.ConsistentRead = aws.Bool(true)
	}
	items, _, err := t.queryPage(ctx, in, int(limit))
	return items, err
}
