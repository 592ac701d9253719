package dynamodb

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/internal/testkit"
)

func testAWSConfig() aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// rawClient returns a plain SDK client for endpoint (test-side reads).
func rawClient(endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(testAWSConfig(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	})
}

func historyConfig(table, endpoint string) Config {
	return Config{
		Table:     TableSpec{Name: table, PKAttribute: "pk", SKAttribute: "sk", SKType: "N"},
		Provision: true,
		Endpoint:  endpoint,
		PK:        "{symbol}#{timeframe}",
		SK:        "{open_time}",
		RetryBase: Duration(5 * time.Millisecond),
		RetryMax:  Duration(100 * time.Millisecond),
	}
}

// tradeConfig is a trade table keyed by symbol and trade time.
func tradeConfig(table, endpoint string) Config {
	cfg := historyConfig(table, endpoint)
	cfg.PK, cfg.SK = "{symbol}", "{ts}"
	return cfg
}

// genTrades makes n trades of sym one second apart, with prices that
// differ per version.
func genTrades(sym string, n, version int) []candle.Trade {
	out := make([]candle.Trade, n)
	for i := range out {
		out[i] = candle.Trade{Key: sym, TS: 1_763_900_000_000 + int64(i)*1000, Price: dec(fmt.Sprintf("%d.%03d", 100+i, version)), Qty: dec("0.5")}
	}
	return out
}

type harness struct {
	sink *Sink
	reg  *prometheus.Registry
	raw  *dynamodb.Client
}

// newSink starts a sink on cfg; wrap (optional) wraps the real client.
func newSink(t testing.TB, cfg Config, wrap func(API) API, opts ...Option) *harness {
	t.Helper()
	raw := rawClient(cfg.Endpoint)
	client, err := NewClient(context.Background(), cfg, WithAWSConfig(testAWSConfig())) // as the sink builds it
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		client = wrap(client)
	}
	reg := prometheus.NewRegistry()
	s, err := New(context.Background(), cfg, append([]Option{WithClient(client), WithRegisterer(reg), WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &harness{sink: s, reg: reg, raw: raw}
}

// metric sums the counter (or gauge) samples of name whose labels include
// the given label=value pairs.
func metric(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func dec(s string) decimal.Decimal { return decimal.MustParse(s) }

// genCandles makes n consecutive candles per symbol and timeframe, with
// prices that differ per version so a stale write would be visible.
func genCandles(symbols, tfs []string, n int, version int) []candle.Candle {
	var out []candle.Candle
	for _, sym := range symbols {
		for _, tfs := range tfs {
			tf, _ := candle.ParseTimeframe(tfs, nil)
			open := tf.Start(1_763_900_000_000)
			for i := 0; i < n; i++ {
				p := dec(fmt.Sprintf("%d.%03d", 100+i, version))
				out = append(out, candle.Candle{
					Symbol: sym, Timeframe: tfs, OpenTime: open, CloseTime: tf.End(open),
					Open: p, High: dec(fmt.Sprintf("%d.5", 101+i)), Low: dec(fmt.Sprintf("%d.25", 99+i)), Close: p,
					Volume: decimal.SumOf(dec("1.000000000000000001")), QuoteVolume: decimal.SumOf(dec(fmt.Sprintf("%d.1", 1000+i))),
					Trades: int64(i + 1), Gap: i%7 == 3,
				})
				open = tf.End(open)
			}
		}
	}
	return out
}

// partitionItems returns every item of one partition, oldest first.
func partitionItems(t testing.TB, raw *dynamodb.Client, table, pkAttr, pk string) []map[string]types.AttributeValue {
	t.Helper()
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": pkAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
	}
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(raw, in)
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("query %s: %v", pk, err)
		}
		items = append(items, out.Items...)
	}
	return items
}

// faultAPI wraps a client: it counts calls, fails the first `throttle`
// BatchWriteItem or PutItem calls with a throttling error, and for the next
// `partial` BatchWriteItem calls writes only the first half of the batch
// and returns the rest as UnprocessedItems. It also records batch shapes
// and the items of PutItem calls.
type faultAPI struct {
	API
	mu        sync.Mutex
	throttle  int
	partial   int
	calls     map[string]int
	batches   [][]map[string]types.AttributeValue
	puts      []map[string]types.AttributeValue
	forceLim  int32 // when > 0, Query pages hold at most this many items
	validate  func(map[string]types.AttributeValue) bool
	mutations int // successful CreateTable/UpdateTable/UpdateTimeToLive
	inflight  int // BatchWriteItem and PutItem calls running now
	maxFlight int // the most that ran at once
}

func newFaultAPI(inner API) *faultAPI { return &faultAPI{API: inner, calls: map[string]int{}} }

func (f *faultAPI) count(op string) {
	f.mu.Lock()
	f.calls[op]++
	f.mu.Unlock()
}

func (f *faultAPI) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *faultAPI) Mutations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mutations
}

func (f *faultAPI) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	f.count("BatchWriteItem")
	f.mu.Lock()
	f.inflight++
	f.maxFlight = max(f.maxFlight, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	var table string
	var reqs []types.WriteRequest
	for k, v := range in.RequestItems {
		table, reqs = k, v
	}
	f.mu.Lock()
	var items []map[string]types.AttributeValue
	for _, r := range reqs {
		items = append(items, r.PutRequest.Item)
	}
	f.batches = append(f.batches, items)
	mode := ""
	switch {
	case f.throttle > 0:
		f.throttle--
		mode = "throttle"
	case f.partial > 0 && len(reqs) > 1:
		f.partial--
		mode = "partial"
	}
	validate := f.validate
	f.mu.Unlock()
	if validate != nil {
		for _, it := range items {
			if !validate(it) {
				return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "One or more parameter values were invalid (injected)"}
			}
		}
	}
	switch mode {
	case "throttle":
		return nil, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "injected throttling"}
	case "partial":
		half := len(reqs) / 2
		out, err := f.API.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs[:half]}}, o...)
		if err != nil {
			return nil, err
		}
		out.UnprocessedItems = map[string][]types.WriteRequest{table: append(out.UnprocessedItems[table], reqs[half:]...)}
		return out, nil
	}
	return f.API.BatchWriteItem(ctx, in, o...)
}

func (f *faultAPI) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.count("PutItem")
	f.mu.Lock()
	f.inflight++
	f.maxFlight = max(f.maxFlight, f.inflight)
	f.puts = append(f.puts, in.Item)
	throttle := f.throttle > 0
	if throttle {
		f.throttle--
	}
	validate := f.validate
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if validate != nil && !validate(in.Item) {
		return nil, &smithy.GenericAPIError{Code: "ValidationException", Message: "One or more parameter values were invalid (injected)"}
	}
	if throttle {
		return nil, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "injected throttling"}
	}
	return f.API.PutItem(ctx, in, o...)
}

func (f *faultAPI) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.count("Query")
	if f.forceLim > 0 && (in.Limit == nil || *in.Limit > f.forceLim) {
		cp := *in
		cp.Limit = aws.Int32(f.forceLim)
		in = &cp
	}
	return f.API.Query(ctx, in, o...)
}

func (f *faultAPI) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	f.count("CreateTable")
	out, err := f.API.CreateTable(ctx, in, o...)
	f.mutated(err)
	return out, err
}

func (f *faultAPI) UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	f.count("UpdateTable")
	out, err := f.API.UpdateTable(ctx, in, o...)
	f.mutated(err)
	return out, err
}

func (f *faultAPI) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	f.count("UpdateTimeToLive")
	out, err := f.API.UpdateTimeToLive(ctx, in, o...)
	f.mutated(err)
	return out, err
}

func (f *faultAPI) mutated(err error) {
	if err == nil {
		f.mu.Lock()
		f.mutations++
		f.mu.Unlock()
	}
}

// ttlAPI emulates UpdateTimeToLive/DescribeTimeToLive in memory, as AWS
// implements them and dynalite does not.
type ttlAPI struct {
	API
	mu   sync.Mutex
	attr map[string]string
}

func (a *ttlAPI) UpdateTimeToLive(_ context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attr == nil {
		a.attr = map[string]string{}
	}
	a.attr[*in.TableName] = *in.TimeToLiveSpecification.AttributeName
	return &dynamodb.UpdateTimeToLiveOutput{TimeToLiveSpecification: in.TimeToLiveSpecification}, nil
}

func (a *ttlAPI) DescribeTimeToLive(_ context.Context, in *dynamodb.DescribeTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}
	if name, ok := a.attr[*in.TableName]; ok {
		d = &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusEnabled, AttributeName: aws.String(name)}
	}
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: d}, nil
}

var _ = testkit.FreePort

// gsiAPI emulates what AWS does and dynalite does not: UpdateTable with a
// GSI Create adds the index, listed as CREATING for the first `creating`
// DescribeTable calls and ACTIVE afterwards.
type gsiAPI struct {
	API
	mu       sync.Mutex
	creating int
	added    map[string]types.GlobalSecondaryIndexDescription
}

func (g *gsiAPI) UpdateTable(_ context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.added == nil {
		g.added = map[string]types.GlobalSecondaryIndexDescription{}
	}
	for _, u := range in.GlobalSecondaryIndexUpdates {
		if u.Create != nil {
			g.added[*u.Create.IndexName] = types.GlobalSecondaryIndexDescription{
				IndexName: u.Create.IndexName, KeySchema: u.Create.KeySchema, Projection: u.Create.Projection,
				IndexStatus: types.IndexStatusCreating}
		}
	}
	return &dynamodb.UpdateTableOutput{}, nil
}

func (g *gsiAPI) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	out, err := g.API.DescribeTable(ctx, in, o...)
	if err != nil {
		return out, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, ix := range g.added {
		if g.creating > 0 {
			g.creating--
		} else {
			ix.IndexStatus = types.IndexStatusActive
			g.added[name] = ix
		}
		out.Table.GlobalSecondaryIndexes = append(out.Table.GlobalSecondaryIndexes, ix)
	}
	return out, nil
}
