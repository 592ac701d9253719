package dynamodb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
)

// The paged reads below serve a device read API: the latest reading of a
// device, its readings by time, the devices at one silence level (through
// a declared GSI) and a device's silence history. Each returns at most
// limit rows and an opaque page token for the next page ("" when there is
// none). A token is only a position: whatever bytes a caller sends as one,
// the read either answers from a valid position or fails with
// ErrBadPageToken, never with a request DynamoDB refuses.

// plainNumber is a number DynamoDB takes as it is (at most 38 digits).
var plainNumber = regexp.MustCompile(`^-?[0-9]{1,38}(\.[0-9]{1,38})?$`)

// ErrBadPageToken is returned for a page token these reads did not hand out.
var ErrBadPageToken = errors.New("not a page token of this read")

// LatestReading returns the newest reading (trade) of key with a strongly
// consistent read: one GetItem when the table keeps one item per key (a
// sort key without time placeholders such as "latest", no {shard}), else
// one Query per write shard (newest first, Limit 1). ok is false when the
// key has none.
func (r *Reader) LatestReading(ctx context.Context, key string) (tr candle.Trade, ok bool, err error) {
	if r.cfg.Shards == 0 && !r.sk.usesTime() {
		items, err := r.GetItems(ctx, []string{key}, true)
		if err != nil {
			return candle.Trade{}, false, err
		}
		it, ok := items[key]
		if !ok {
			return candle.Trade{}, false, nil
		}
		tr, err := itemTrade(it)
		if err != nil {
			return candle.Trade{}, false, fmt.Errorf("dynamodb latest reading of %q: %w", key, err)
		}
		return tr, true, nil
	}
	pks, err := r.partitions(key, "")
	if err != nil {
		return candle.Trade{}, false, err
	}
	for _, pk := range pks {
		in := r.keyCond(pk, nil)
		in.ConsistentRead = aws.Bool(true)
		items, err := r.query(ctx, in, false, 1)
		if err != nil {
			return candle.Trade{}, false, err
		}
		for _, it := range items[:min(len(items), 1)] {
			got, err := itemTrade(it)
			if err != nil {
				return candle.Trade{}, false, fmt.Errorf("dynamodb latest reading of %q: %w", key, err)
			}
			if !ok || got.TS > tr.TS {
				tr, ok = got, true
			}
		}
	}
	return tr, ok, nil
}

// ReadingsPage returns up to limit readings of key with ts in [from, to),
// oldest first (sort key order), merged over the write shards, and the
// token of the next page. Each page reads at most limit items per shard.
func (r *Reader) ReadingsPage(ctx context.Context, key string, from, to int64, limit int, token string) ([]candle.Trade, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("dynamodb ReadingsPage: limit must be positive")
	}
	pks, err := r.partitions(key, "")
	if err != nil {
		return nil, "", err
	}
	// pos[i]: the sort key of the last reading of shard i already returned
	// ("" none yet); done[i]: the shard has nothing more in the range.
	pos, done := make([]string, len(pks)), make([]bool, len(pks))
	if token != "" {
		var t struct {
			Pos  []string `json:"p"`
			Done []bool   `json:"d"`
		}
		if decodeToken(token, &t) != nil || len(t.Pos) != len(pks) || len(t.Done) != len(pks) {
			return nil, "", ErrBadPageToken
		}
		for _, p := range t.Pos {
			if p != "" && !r.validSK(p) {
				return nil, "", ErrBadPageToken
			}
		}
		pos, done = t.Pos, t.Done
	}
	numeric := r.cfg.Table.SKType == "N"
	less := func(a, b string) bool {
		if numeric {
			x, _ := strconv.ParseInt(a, 10, 64)
			y, _ := strconv.ParseInt(b, 10, 64)
			return x < y
		}
		return a < b
	}
	type row struct {
		shard int
		sk    string
		tr    candle.Trade
	}
	var rows []row
	fetched := make([]int, len(pks))
	for i, pk := range pks {
		if done[i] {
			continue
		}
		in, ok := r.rangeCond(pk, pos[i], from, to)
		if !ok {
			done[i] = true
			continue
		}
		items, err := r.query(ctx, in, true, int32(limit+1)) // +1: a string lower bound repeats the last one
		if err != nil {
			return nil, "", err
		}
		for _, it := range items {
			sk := attrString(it[r.cfg.Table.SKAttribute])
			if sk == pos[i] {
				continue // the last one returned (a string lower bound is inclusive)
			}
			if fetched[i] == limit {
				break
			}
			fetched[i]++
			tr, err := itemTrade(it)
			if err != nil {
				return nil, "", fmt.Errorf("dynamodb readings of %q: %w", key, err)
			}
			rows = append(rows, row{i, sk, tr})
		}
		if fetched[i] < limit {
			done[i] = true // the shard's range is exhausted
		}
	}
	sort.SliceStable(rows, func(a, b int) bool { return less(rows[a].sk, rows[b].sk) })
	if len(rows) > limit {
		for _, r := range rows[limit:] {
			done[r.shard] = false // some of its readings wait for the next page
		}
		rows = rows[:limit]
	}
	out := make([]candle.Trade, 0, len(rows))
	for _, r := range rows {
		pos[r.shard] = r.sk
		if r.tr.TS >= from && r.tr.TS < to {
			out = append(out, r.tr)
		}
	}
	if !slices.Contains(done, false) {
		return out, "", nil
	}
	return out, encodeToken(struct {
		Pos  []string `json:"p"`
		Done []bool   `json:"d"`
	}{pos, done}), nil
}

// rangeCond is the key condition for the sort keys of partition pk after
// the sort key last ("" from the start) and of times before to; ok is
// false when no sort key is left.
func (t *table) rangeCond(pk, last string, from, to int64) (*dynamodb.QueryInput, bool) {
	if to <= from {
		return nil, false
	}
	in := t.keyCond(pk, &[2]int64{from, to})
	if last == "" {
		return in, true
	}
	if t.cfg.Table.SKType == "N" {
		n, _ := strconv.ParseInt(last, 10, 64)
		if max(n+1, from) > to-1 {
			return nil, false
		}
		in.ExpressionAttributeValues[":lo"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(max(n+1, from), 10)}
		return in, true
	}
	hi := in.ExpressionAttributeValues[":hi"].(*types.AttributeValueMemberS).Value
	lo := in.ExpressionAttributeValues[":lo"].(*types.AttributeValueMemberS).Value
	if last > hi {
		return nil, false
	}
	if last > lo {
		in.ExpressionAttributeValues[":lo"] = strAttr(last)
	}
	return in, true
}

// validSK reports whether v can be a sort key of the table.
func (t *table) validSK(v string) bool {
	if len(v) > maxSKBytes {
		return false
	}
	if t.cfg.Table.SKType == "N" {
		_, err := strconv.ParseInt(v, 10, 64)
		return err == nil
	}
	return v != ""
}

// EventsPage returns up to limit items of the partition whose pk renders
// from fields (e.g. {"device": "d1"} for a pk "DEVICE#{device}"), in sort
// key order, and the next page's token: the silence history of a device
// kept by an events sink keyed by device.
func (r *Reader) EventsPage(ctx context.Context, fields map[string]string, limit int, token string) ([]map[string]types.AttributeValue, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("dynamodb EventsPage: limit must be positive")
	}
	for _, p := range r.pk.parts {
		if p.ph != phLiteral && p.ph != phField {
			return nil, "", fmt.Errorf("table %s: pk %q must render from event fields alone to read one device's events", r.cfg.Table.Name, r.pk.src)
		}
		if p.ph == phField && fields[p.lit] == "" {
			return nil, "", fmt.Errorf("table %s: pk %q needs the field %q to read a partition", r.cfg.Table.Name, r.pk.src, p.lit)
		}
	}
	pk := r.pk.render(&vars{fields: fields})
	in := &dynamodb.QueryInput{TableName: aws.String(r.cfg.Table.Name),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": r.cfg.Table.PKAttribute},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": strAttr(pk)}}
	if token != "" {
		var last string
		if decodeToken(token, &last) != nil || !r.validSK(last) {
			return nil, "", ErrBadPageToken
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{r.cfg.Table.PKAttribute: strAttr(pk), r.cfg.Table.SKAttribute: r.skAttr(last)}
	}
	items, lastKey, err := r.queryPage(ctx, in, limit)
	if err != nil {
		return nil, "", err
	}
	if lastKey == nil {
		return items, "", nil
	}
	return items, encodeToken(attrString(lastKey[r.cfg.Table.SKAttribute])), nil
}

// IndexPage returns up to limit items of the declared GSI index whose key
// is value (e.g. every device at one silence level), and the next page's
// token. GSIs are eventually consistent.
func (r *Reader) IndexPage(ctx context.Context, index, value string, limit int, token string) ([]map[string]types.AttributeValue, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("dynamodb IndexPage: limit must be positive")
	}
	spec, ok := r.cfg.Table.GSIs[index]
	if !ok {
		return nil, "", fmt.Errorf("table %s declares no global secondary index %q (table.gsis)", r.cfg.Table.Name, index)
	}
	t := r.cfg.Table
	typed := func(typ, v string) (types.AttributeValue, bool) {
		if typ == "N" {
			if !plainNumber.MatchString(v) || len(strings.Trim(v, "-.0")) > 38 {
				return nil, false
			}
			return &types.AttributeValueMemberN{Value: v}, true
		}
		return strAttr(v), v != ""
	}
	keyVal, ok := typed(spec.PKType, value)
	if !ok {
		return nil, "", fmt.Errorf("index %s: %q is not a key of type %s", index, value, spec.PKType)
	}
	in := &dynamodb.QueryInput{TableName: aws.String(t.Name), IndexName: aws.String(index),
		KeyConditionExpression:    aws.String("#k = :v"),
		ExpressionAttributeNames:  map[string]string{"#k": spec.PK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": keyVal}}
	// The key attributes of a position in the index and their types.
	keyTypes := map[string]string{t.PKAttribute: "S", t.SKAttribute: orDefault(t.SKType, "S"), spec.PK: orDefault(spec.PKType, "S")}
	if spec.SK != "" {
		keyTypes[spec.SK] = orDefault(spec.SKType, "N")
	}
	if token != "" {
		var pos map[string]string
		if decodeToken(token, &pos) != nil || len(pos) != len(keyTypes) || pos[spec.PK] != value {
			return nil, "", ErrBadPageToken
		}
		in.ExclusiveStartKey = map[string]types.AttributeValue{}
		for name, typ := range keyTypes {
			v, ok := pos[name]
			if !ok || len(v) > maxPKBytes {
				return nil, "", ErrBadPageToken
			}
			av, ok := typed(typ, v)
			if !ok {
				return nil, "", ErrBadPageToken
			}
			in.ExclusiveStartKey[name] = av
		}
	}
	items, lastKey, err := r.queryPage(ctx, in, limit)
	if err != nil {
		return nil, "", err
	}
	if lastKey == nil {
		return items, "", nil
	}
	pos := map[string]string{}
	for name := range keyTypes {
		pos[name] = attrString(lastKey[name])
	}
	return items, encodeToken(pos), nil
}

// queryPage runs in for up to limit items (all when limit <= 0), following
// LastEvaluatedKey and retrying transient errors; it returns the key of the
// last item when more may follow (nil at the end).
func (t *table) queryPage(ctx context.Context, in *dynamodb.QueryInput, limit int) ([]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	if limit > 0 {
		in.Limit = aws.Int32(int32(limit))
	}
	var items []map[string]types.AttributeValue
	for {
		var out *dynamodb.QueryOutput
		err := t.do(ctx, "Query", func(ctx context.Context) error {
			var err error
			out, err = t.client.Query(ctx, in)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("dynamodb Query on table %s: %w", t.cfg.Table.Name, err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil, nil
		}
		if limit > 0 && len(items) >= limit {
			items = items[:limit]
			return items, items[limit-1], nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		if limit > 0 {
			in.Limit = aws.Int32(int32(limit - len(items)))
		}
	}
}

func encodeToken(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(tok string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ItemJSON writes an item as a JSON object with sorted attribute names
// (strings and numbers as DynamoDB holds them, every digit kept), leaving
// out the attributes named in skip.
func ItemJSON(b []byte, it map[string]types.AttributeValue, skip ...string) []byte {
	names := make([]string, 0, len(it))
	for k := range it {
		if !slices.Contains(skip, k) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	b = append(b, '{')
	for i, k := range names {
		if i > 0 {
			b = append(b, ',')
		}
		q, _ := json.Marshal(k)
		b = append(append(b, q...), ':')
		switch v := it[k].(type) {
		case *types.AttributeValueMemberS:
			q, _ := json.Marshal(v.Value)
			b = append(b, q...)
		case *types.AttributeValueMemberN:
			b = append(b, v.Value...)
		case *types.AttributeValueMemberBOOL:
			b = strconv.AppendBool(b, v.Value)
		default:
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

// KeyAttributes names the table's pk, sk and TTL attributes (storage
// details a reader usually leaves out of what it shows).
func (r *Reader) KeyAttributes() []string {
	t := r.cfg.Table
	return []string{t.PKAttribute, t.SKAttribute, t.TTLAttribute}
}

// HasIndex reports whether the table declares the GSI name.
func (r *Reader) HasIndex(name string) bool { _, ok := r.cfg.Table.GSIs[name]; return ok }
