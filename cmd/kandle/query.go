package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbsdk "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/decimal"
)

const queryUsage = `-t topology.yaml -sink NAME [-json] ACTION ARGS...

Actions (the reads of docs/contract.md, "What the stores hold"):
  latest SYMBOL TIMEFRAME                   newest candle of one symbol, e.g. latest BTC 1m
  range SYMBOL TIMEFRAME -from T -to T      candles with open_time in [from, to), oldest first
  many SYMBOL,SYMBOL,... TIMEFRAME          newest candle of each symbol (absent ones are skipped)
  readings KEY -from T -to T                trades/readings of KEY with ts in [from, to), merged over
                                            the write shards ({shard} in pk)
  trades SYMBOL -from T -to T               trade ledger rows of SYMBOL with ts in [from, to), for a pk
                                            bucketed by time like {symbol}#{yyyy}-{mm}-{dd}-{hh}
  items KEY,KEY,...                         the item of each key (BatchGetItem, 100 keys a request,
                                            unprocessed keys retried), e.g. the latest reading of many
                                            devices from a sink with pk "{symbol}" and sk "latest"
  index NAME VALUE                          the items of a declared GSI whose key is VALUE, e.g. every
                                            device at one silence level (GSIs are eventually consistent)

-consistent makes latest, range, many, readings and items strongly consistent reads.

Times T are RFC 3339 (2026-01-05T10:00:00Z) or epoch milliseconds. -to defaults to now.`

// cmdQuery reads candles (or readings) back from a DynamoDB sink of a
// topology, through the same key templates the sink writes with, so an
// operator can check what a chart or an API would see.
func cmdQuery(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlags(e, "query", queryUsage,
		"Reads from the table of a dynamodb sink using the sink's own key templates, region and endpoint.")
	top := topologyFlag(fs)
	sinkName := fs.String("sink", "", "name of the dynamodb sink to read (required when the topology has several)")
	asJSON := fs.Bool("json", false, "print one JSON object per line (candles as on the candle topics) instead of a table")
	from := fs.String("from", "", "start of the time range, inclusive (range, readings)")
	to := fs.String("to", "", "end of the time range, exclusive (range, readings; default now)")
	consistent := fs.Bool("consistent", false, "strongly consistent reads (not on GSIs, which DynamoDB reads eventually consistently)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long (reads retry while DynamoDB is unreachable or throttling)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if e.parseOnly {
		return errParsed
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	defer func() {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: no answer within -timeout %v; check that the sink's endpoint is reachable and the credentials are valid, or raise -timeout", err, *timeout)
		}
	}()
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("name an action: latest, range, many, readings, trades, items or index")
	}
	t, err := loadTopology(*top)
	if err != nil {
		return reportTopology(e, err)
	}
	name := *sinkName
	if name == "" {
		var names []string
		for _, n := range slices.Sorted(maps.Keys(t.Sinks)) {
			if _, ok := t.Sinks[n].Config.(*dynamodb.Config); ok {
				names = append(names, n)
			}
		}
		if len(names) != 1 {
			return fmt.Errorf("pick the sink to read with -sink (dynamodb sinks in %s: %s)", t.Name, strings.Join(names, ", "))
		}
		name = names[0]
	}
	sk, ok := t.Sinks[name]
	if !ok {
		return fmt.Errorf("topology %s has no sink %q", t.Name, name)
	}
	cfg, ok := sk.Config.(*dynamodb.Config)
	if !ok {
		return fmt.Errorf("sink %q is a %s sink; kandle query reads dynamodb sinks", name, sk.Kind)
	}
	s, err := dynamodb.NewReader(ctx, *cfg, dynamodb.WithLogger(e.log))
	if err != nil {
		return fmt.Errorf("sink %s: %w", name, err)
	}
	s.SetConsistentReads(*consistent)
	bounds := func() (int64, int64, error) {
		if *from == "" {
			return 0, 0, fmt.Errorf("%s needs -from (RFC 3339 or epoch ms)", pos[0])
		}
		lo, err := parseTimeArg(*from)
		if err != nil {
			return 0, 0, fmt.Errorf("-from: %w", err)
		}
		hi := time.Now().UnixMilli()
		if *to != "" {
			if hi, err = parseTimeArg(*to); err != nil {
				return 0, 0, fmt.Errorf("-to: %w", err)
			}
		}
		if hi <= lo {
			return 0, 0, fmt.Errorf("-to (%s) must be after -from (%s)", fmtMillis(hi), fmtMillis(lo))
		}
		return lo, hi, nil
	}
	want := func(n int, shape string) error {
		if len(pos)-1 != n {
			return fmt.Errorf("usage: kandle query %s", shape)
		}
		return nil
	}
	var candles []candle.Candle
	switch pos[0] {
	case "latest":
		if err := want(2, "latest SYMBOL TIMEFRAME"); err != nil {
			return err
		}
		c, ok, err := s.Latest(ctx, pos[1], pos[2])
		if err != nil {
			return err
		}
		if ok {
			candles = append(candles, c)
		}
	case "range":
		if err := want(2, "range SYMBOL TIMEFRAME -from T [-to T]"); err != nil {
			return err
		}
		lo, hi, err := bounds()
		if err != nil {
			return err
		}
		if candles, err = s.Range(ctx, pos[1], pos[2], lo, hi); err != nil {
			return err
		}
	case "many":
		if err := want(2, "many SYMBOL,SYMBOL,... TIMEFRAME"); err != nil {
			return err
		}
		syms := splitList(pos[1])
		got, err := s.LatestMany(ctx, syms, pos[2])
		if err != nil {
			return err
		}
		for _, sym := range syms {
			if c, ok := got[sym]; ok {
				candles = append(candles, c)
			}
		}
	case "readings":
		if err := want(1, "readings KEY -from T [-to T]"); err != nil {
			return err
		}
		lo, hi, err := bounds()
		if err != nil {
			return err
		}
		trades, err := s.ReadSharded(ctx, pos[1], lo, hi)
		if err != nil {
			return err
		}
		return writeTradeRows(e.stdout, trades, *asJSON)
	case "trades":
		if err := want(1, "trades SYMBOL -from T [-to T]"); err != nil {
			return err
		}
		lo, hi, err := bounds()
		if err != nil {
			return err
		}
		client, err := dynamodb.NewClient(ctx, *cfg, dynamodb.WithLogger(e.log))
		if err != nil {
			return err
		}
		trades, err := ledgerTrades(ctx, client, cfg, pos[1], lo, hi)
		if err != nil {
			return err
		}
		return writeTradeRows(e.stdout, trades, *asJSON)
	case "items":
		if err := want(1, "items KEY,KEY,..."); err != nil {
			return err
		}
		keys := splitList(pos[1])
		got, err := s.GetItems(ctx, keys, *consistent)
		if err != nil {
			return err
		}
		var items []map[string]types.AttributeValue
		for _, k := range keys {
			if it, ok := got[k]; ok {
				items = append(items, it)
			}
		}
		return writeItems(e.stdout, items)
	case "index":
		if err := want(2, "index NAME VALUE"); err != nil {
			return err
		}
		if *consistent {
			return errors.New("-consistent: DynamoDB reads global secondary indexes eventually consistently only; drop -consistent")
		}
		items, err := s.QueryIndex(ctx, pos[1], pos[2], 0)
		if err != nil {
			return err
		}
		return writeItems(e.stdout, items)
	default:
		return fmt.Errorf("unknown action %q: use latest, range, many, readings, trades, items or index (kandle query -h)", pos[0])
	}
	return writeCandleRows(e.stdout, candles, *asJSON)
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments (`range BTC 1m -from …`), which flag.Parse alone
// stops at.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func parseTimeArg(s string) (int64, error) {
	ms, err := candle.ParseEventTime([]byte(s), true)
	if err != nil {
		return 0, fmt.Errorf("%q is neither RFC 3339 (2026-01-05T10:00:00Z) nor epoch milliseconds", s)
	}
	return ms, nil
}

func fmtMillis(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

func writeCandleRows(w io.Writer, cs []candle.Candle, asJSON bool) error {
	if asJSON {
		var b []byte
		for i := range cs {
			b = append(cs[i].AppendJSON(b), '\n')
		}
		_, err := w.Write(b)
		return err
	}
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "no candles")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SYMBOL\tTF\tOPEN_TIME\tOPEN\tHIGH\tLOW\tCLOSE\tVOLUME\tQUOTE_VOLUME\tTRADES\tGAP")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%v\n", c.Symbol, c.Timeframe, fmtMillis(c.OpenTime),
			c.Open, c.High, c.Low, c.Close, c.Volume, c.QuoteVolume, c.Trades, c.Gap)
	}
	return tw.Flush()
}

func writeTradeRows(w io.Writer, ts []candle.Trade, asJSON bool) error {
	if asJSON {
		var b []byte
		for _, t := range ts {
			b = append(b, `{"key":`...)
			b = strconv.AppendQuote(b, t.Key)
			b = append(b, `,"ts":`...)
			b = strconv.AppendInt(b, t.TS, 10)
			b = append(b, `,"price":"`...)
			b = t.Price.Append(b)
			b = append(b, `","qty":"`...)
			b = t.Qty.Append(b)
			b = append(b, `","trade_id":`...)
			b = strconv.AppendQuote(b, t.ID)
			b = append(b, "}\n"...)
		}
		_, err := w.Write(b)
		return err
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(w, "no readings")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTS\tID\tPRICE\tQTY")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Key, fmtMillis(t.TS), t.ID, t.Price, t.Qty)
	}
	return tw.Flush()
}

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

// writeItems prints items as JSON objects, one per line: strings as
// strings, numbers as JSON numbers (their exact text), booleans as booleans.
func writeItems(w io.Writer, items []map[string]types.AttributeValue) error {
	for _, it := range items {
		if _, err := w.Write(append(dynamodb.ItemJSON(nil, it), '\n')); err != nil {
			return err
		}
	}
	return nil
}
