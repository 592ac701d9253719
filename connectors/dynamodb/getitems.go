package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kandle/kandle/connectors/sinkkit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// batchGetMax is BatchGetItem's limit of keys per request.
const batchGetMax = 100

// batchGetter is the client call GetItems needs (the SDK client has it).
type batchGetter interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// GetItems reads the items of many keys at once — e.g. the latest reading
// of many devices, kept current by a sink whose sort key template is a
// constant such as "latest" — with BatchGetItem in chunks of 100, retrying
// the UnprocessedKeys DynamoDB hands back (throttling, 16 MB responses)
// with jittered backoff until ctx ends. keys are the {symbol} (device) of
// the pk template; the sk template must render without time placeholders.
// consistent asks for strongly consistent reads. Keys without an item are
// absent from the result.
func (r *Reader) GetItems(ctx context.Context, keys []string, consistent bool) (map[string]map[string]types.AttributeValue, error) {
	bg, ok := r.client.(batchGetter)
	if !ok {
		return nil, errors.New("dynamodb: the client cannot BatchGetItem")
	}
	if r.cfg.Shards > 0 || r.sk.usesTime() {
		return nil, fmt.Errorf("table %s: items can be fetched by key only when pk and sk render from the key alone (no {shard}, no time placeholders in %q / %q)", r.cfg.Table.Name, r.cfg.PK, r.cfg.SK)
	}
	t := r.cfg.Table
	byPK := map[string]string{} // rendered pk+sk → key
	var reqKeys []map[string]types.AttributeValue
	for _, k := range keys {
		v := vars{symbol: k}
		pk, sk, err := r.keyAttrs(&v)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		if _, dup := byPK[pk+"\x00"+sk]; dup {
			continue
		}
		byPK[pk+"\x00"+sk] = k
		reqKeys = append(reqKeys, map[string]types.AttributeValue{t.PKAttribute: strAttr(pk), t.SKAttribute: r.skAttr(sk)})
	}
	out := map[string]map[string]types.AttributeValue{}
	for i := 0; i < len(reqKeys); i += batchGetMax {
		pending := reqKeys[i:min(i+batchGetMax, len(reqKeys))]
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 0 {
				r.m.retries.WithLabelValues(t.Name, "unprocessed").Inc()
				if err := sinkkit.Sleep(ctx, sinkkit.Backoff{Min: time.Duration(r.cfg.RetryBase), Max: time.Duration(r.cfg.RetryMax)}.Delay(attempt-1)); err != nil {
					return nil, fmt.Errorf("dynamodb BatchGetItem on table %s: %d keys unprocessed: %w", t.Name, len(pending), err)
				}
			}
			in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				t.Name: {Keys: pending, ConsistentRead: aws.Bool(consistent)}}}
			var res *dynamodb.BatchGetItemOutput
			err := r.do(ctx, "BatchGetItem", func(ctx context.Context) error {
				var err error
				res, err = bg.BatchGetItem(ctx, in)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("dynamodb BatchGetItem on table %s: %w", t.Name, err)
			}
			for _, it := range res.Responses[t.Name] {
				if k, ok := byPK[attrString(it[t.PKAttribute])+"\x00"+attrString(it[t.SKAttribute])]; ok {
					out[k] = it
				}
			}
			pending = res.UnprocessedKeys[t.Name].Keys
		}
	}
	return out, nil
}

// QueryIndex returns the items of one partition of a declared global
// secondary index, e.g. every device whose level is "unreachable" from an
// index on the events' level attribute. GSIs are eventually consistent:
// DynamoDB refuses strongly consistent reads on them, so there is no such
// option here.
func (r *Reader) QueryIndex(ctx context.Context, index, value string, limit int32) ([]map[string]types.AttributeValue, error) {
	spec, ok := r.cfg.Table.GSIs[index]
	if !ok {
		return nil, fmt.Errorf("table %s declares no global secondary index %q (table.gsis)", r.cfg.Table.Name, index)
	}
	var v types.AttributeValue = strAttr(value)
	if spec.PKType == "N" {
		v = &types.AttributeValueMemberN{Value: value}
	}
	in := &dynamodb.QueryInput{TableName: aws.String(r.cfg.Table.Name), IndexName: aws.String(index),
		KeyConditionExpression:    aws.String("#k = :v"),
		ExpressionAttributeNames:  map[string]string{"#k": spec.PK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v}}
	return r.query(ctx, in, true, limit)
}

// usesTime reports whether t renders a time (so one key has many items).
func (t template) usesTime() bool {
	for _, ph := range []placeholder{phOpenTime, phCloseTime, phTS, phYYYY, phMM, phDD, phHH} {
		if t.uses(ph) {
			return true
		}
	}
	return false
}
