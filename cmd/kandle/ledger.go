package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbsdk "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/decimal"
)

// A trade ledger keys its partitions by symbol and a time bucket
// ({symbol}#{yyyy}-{mm}-{dd}-{hh}), so "the trades of BTC between two
// times" is one Query per bucket. The sink's own readers need pks without
// time placeholders; this walks the buckets instead.

var ledgerPlaceholder = regexp.MustCompile(`\{[a-z_]+\}`)

// ledgerTrades returns the trades of symbol with ts in [from, to), oldest first.
func ledgerTrades(ctx context.Context, client dynamodb.API, cfg *dynamodb.Config, symbol string, from, to int64) ([]candle.Trade, error) {
	step, err := ledgerBucket(cfg.PK)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(cfg.SK, "{ts}") {
		return nil, fmt.Errorf("sink table %s: trades needs a sort key starting with {ts} (got %q)", cfg.Table.Name, cfg.SK)
	}
	if n := (to - from) / step.Milliseconds(); n > 24*366 {
		return nil, fmt.Errorf("%d %v buckets to read: narrow -from/-to", n, step)
	}
	lo, hi := strconv.FormatInt(from, 10), strconv.FormatInt(to-1, 10)
	var out []candle.Trade
	for b := time.UnixMilli(from).UTC().Truncate(step); b.UnixMilli() < to; b = b.Add(step) {
		pk := strings.NewReplacer("{symbol}", symbol, "{yyyy}", b.Format("2006"), "{mm}", b.Format("01"),
			"{dd}", b.Format("02"), "{hh}", b.Format("15")).Replace(cfg.PK)
		in := &ddbsdk.QueryInput{
			TableName:                aws.String(cfg.Table.Name),
			KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
			ExpressionAttributeNames: map[string]string{"#pk": cfg.Table.PKAttribute, "#sk": cfg.Table.SKAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: pk},
				":lo": &types.AttributeValueMemberS{Value: lo},
				":hi": &types.AttributeValueMemberS{Value: hi + "\uffff"},
			},
		}
		if cfg.Table.SKType == "N" {
			in.ExpressionAttributeValues[":lo"] = &types.AttributeValueMemberN{Value: lo}
			in.ExpressionAttributeValues[":hi"] = &types.AttributeValueMemberN{Value: hi}
		}
		for {
			page, err := client.Query(ctx, in)
			if err != nil {
				return nil, fmt.Errorf("query %s partition %s: %w", cfg.Table.Name, pk, err)
			}
			for _, it := range page.Items {
				t, err := ledgerItem(it)
				if err != nil {
					return nil, fmt.Errorf("table %s partition %s: %w", cfg.Table.Name, pk, err)
				}
				if t.TS >= from && t.TS < to {
					out = append(out, t)
				}
			}
			if len(page.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = page.LastEvaluatedKey
		}
	}
	return out, nil
}

// ledgerBucket returns the time bucket a pk template partitions by.
func ledgerBucket(pk string) (time.Duration, error) {
	has := map[string]bool{}
	for _, ph := range ledgerPlaceholder.FindAllString(pk, -1) {
		switch ph {
		case "{symbol}", "{yyyy}", "{mm}", "{dd}", "{hh}":
			has[ph] = true
		default:
			return 0, fmt.Errorf("trades reads pks made of {symbol}, {yyyy}, {mm}, {dd} and {hh}; %q has %s", pk, ph)
		}
	}
	switch {
	case !has["{symbol}"] || !has["{yyyy}"] || !has["{mm}"] || !has["{dd}"]:
		return 0, fmt.Errorf("trades needs a pk with {symbol} and a day or hour bucket ({yyyy}…{dd}[{hh}]); got %q (use readings or range)", pk)
	case has["{hh}"]:
		return time.Hour, nil
	}
	return 24 * time.Hour, nil
}

func ledgerItem(it map[string]types.AttributeValue) (candle.Trade, error) {
	str := func(k string) string {
		switch v := it[k].(type) {
		case *types.AttributeValueMemberS:
			return v.Value
		case *types.AttributeValueMemberN:
			return v.Value
		}
		return ""
	}
	var t candle.Trade
	var err error
	t.Key, t.ID = str("symbol"), str("trade_id")
	if t.TS, err = strconv.ParseInt(str("ts"), 10, 64); err != nil {
		return t, fmt.Errorf("item without a numeric ts: %w", err)
	}
	if t.Price, err = decimal.Parse([]byte(str("price"))); err != nil {
		return t, fmt.Errorf("item price: %w", err)
	}
	if t.Qty, err = decimal.Parse([]byte(str("qty"))); err != nil {
		return t, fmt.Errorf("item qty: %w", err)
	}
	return t, nil
}
