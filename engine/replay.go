package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// Bound is one end of a replay range: the earliest/latest offset, an offset
// per partition, or a time.
type Bound struct {
	Kind   BoundKind
	Offset int64
	Time   time.Time
}

// BoundKind says what a Bound holds.
type BoundKind int

// Bound kinds.
const (
	BoundEdge   BoundKind = iota // earliest (from) or the end offsets seen at start (to)
	BoundOffset                  // the same offset on every partition
	BoundTime                    // the first offset at or after a time
)

// ParseBound reads "earliest", "end", an offset, or an RFC 3339 time.
func ParseBound(s string) (Bound, error) {
	switch s {
	case "", "earliest", "end", "latest":
		return Bound{Kind: BoundEdge}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return Bound{Kind: BoundOffset, Offset: n}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return Bound{Kind: BoundTime, Time: t}, nil
	}
	return Bound{}, fmt.Errorf("%q is not earliest, end, an offset or an RFC 3339 time (e.g. 2026-11-23T10:00:00Z)", s)
}

// ReplayOptions bound and direct a replay.
type ReplayOptions struct {
	From, To   Bound
	Partitions []int32 // nil = all
	// Processors limits what is written to the candles and dead letters of
	// these processors (nil = all). Every processor still runs, so a rollup
	// gets the candles it is built from.
	Processors []string
	// Warmup is read before a mid-stream From so every key knows its previous
	// close and every window that straddles From is complete; candles opening
	// before From are not written. Default: the longest window of the
	// topology plus its lateness.
	Warmup time.Duration
	// Started is the replay's clock: the future guard compares with it. Replay
	// never reads the wall clock otherwise.
	Started time.Time
	// Out receives candles and dead letters instead of the topology's topics.
	Out ReplayOutput
	// Progress is called about every second with the counts so far.
	Progress func(Progress)
	Logger   *slog.Logger
	// Timeout bounds how long the replay waits for brokers that do not
	// answer at all (unreachable, down) before it fails; a broker that
	// answers slowly is waited for. Default DefaultReplayTimeout.
	Timeout time.Duration
}

// DefaultReplayTimeout is how long a replay waits for silent brokers.
const DefaultReplayTimeout = time.Minute

// stallCheck is how long a replay polls without a visible record before it
// asks the broker what is left before the end offsets.
const stallCheck = 5 * time.Second

// ReplayOutput receives what a replay produces.
type ReplayOutput interface {
	Candle(stage string, topic string, c *candle.Candle) error
	DeadLetter(stage string, r *processors.Rejection) error
	Close(ctx context.Context) error
}

// Progress is a replay's position.
type Progress struct {
	Records, Total int64
	Lag            map[int32]int64 // records left per source partition
	Elapsed        time.Duration
}

// Replay reads a bounded range of every source of t without joining any
// consumer group and runs it through the processors in process. It returns
// once the end offsets (fixed at start) are reached.
func Replay(ctx context.Context, t *topology.Topology, brokers []string, o ReplayOptions) (Progress, error) {
	g, err := buildGraph(t)
	if err != nil {
		return Progress{}, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.Started.IsZero() {
		return Progress{}, fmt.Errorf("replay: Started must be set (the replay's fixed clock)")
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultReplayTimeout
	}
	var cl *kgo.Client // only when a source is a Kafka topic: a Kinesis-only replay to a file needs no broker
	var adm *kadm.Client
	if slices.ContainsFunc(slices.Sorted(maps.Keys(t.Sources)), func(name string) bool { return !t.Sources[name].IsKinesis() }) {
		cl, err = newClient(t, brokers, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(), kgo.WithLogger(kgoLogger(log)))
		if err != nil {
			return Progress{}, err
		}
		defer cl.Close()
		if err := kafka.CheckAuth(ctx, cl, t.Kafka); err != nil {
			return Progress{}, err
		}
		adm = kadm.NewClient(cl)
		if err := reachable(ctx, cl, brokers, timeout); err != nil {
			return Progress{}, err
		}
	}

	p := newPipeline(g, processors.FixedClock{T: o.Started})
	p.Log = log
	emitFrom := int64(-1 << 62)
	if o.From.Kind == BoundTime {
		emitFrom = o.From.Time.UnixMilli()
	}
	only := map[string]bool{}
	for _, name := range o.Processors {
		if g.byName[name] == nil {
			return Progress{}, fmt.Errorf("replay: topology %s has no processor %q (it has %s)", t.Name, name, strings.Join(slices.Sorted(maps.Keys(t.Processors)), ", "))
		}
		only[name] = true
	}
	writes := func(stage string) bool { return len(only) == 0 || only[stage] }
	p.OnCandle = func(stage, topic string, c *candle.Candle, _ int32) {
		if c.OpenTime < emitFrom || !writes(stage) {
			return
		}
		if err == nil {
			err = o.Out.Candle(stage, topic, c)
		}
	}
	p.OnReject = func(stage string, r *processors.Rejection) {
		if err == nil && writes(stage) {
			err = o.Out.DeadLetter(stage, r)
		}
	}
	if eo, ok := o.Out.(EventOutput); ok {
		p.OnEvent = func(stage, topic string, ev *processors.Event, _ int32) {
			if err == nil && writes(stage) {
				err = eo.Event(stage, topic, ev)
			}
		}
	}
	if qo, ok := o.Out.(quietOutput); ok {
		p.OnQuiet = func(stage, topic, key string, value []byte) {
			if err == nil && writes(stage) {
				err = qo.Quiet(stage, topic, key, value)
			}
		}
	}
	warm := o.Warmup
	if warm == 0 {
		warm = defaultWarmup(g)
		o.Warmup = warm
	}
	var prog Progress
	start := time.Now() // for progress only; results never depend on it
	for _, srcName := range slices.Sorted(maps.Keys(t.Sources)) {
		src := t.Sources[srcName]
		if src.IsKinesis() {
			n, kerr := replayKinesis(ctx, p, g, srcName, src, o)
			prog.Records += n
			if kerr != nil {
				return prog, kerr
			}
			if err != nil {
				return prog, err
			}
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, timeout)
		ranges, rerr := resolveRange(rctx, adm, src.Topic, o, warm)
		rcancel()
		if rerr != nil {
			if ctx.Err() == nil && rctx.Err() != nil {
				rerr = fmt.Errorf("replay: the brokers %v did not answer within %s (%w): check that they are up and reachable, or raise --timeout", brokers, timeout, rerr)
			}
			return prog, rerr
		}
		for _, r := range ranges {
			prog.Total += r.end - r.start
		}
		offsets := map[int32]kgo.Offset{}
		left := map[int32]int64{}
		for _, r := range ranges {
			if r.end > r.start {
				offsets[r.partition] = kgo.NewOffset().At(r.start)
				left[r.partition] = r.end
			}
		}
		if len(offsets) == 0 {
			continue
		}
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{src.Topic: offsets})
		pos := map[int32]int64{} // next offset not yet seen, per partition left
		for _, r := range ranges {
			if r.end > r.start {
				pos[r.partition] = r.start
			}
		}
		lastReport, quietSince, contact := time.Now(), time.Now(), time.Now()
		var lastFetchErr error
		for len(left) > 0 {
			pollCtx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pollCtx)
			cancel()
			if ctx.Err() != nil {
				return prog, ctx.Err()
			}
			fs.EachError(func(t string, part int32, e error) {
				if !errors.Is(e, context.DeadlineExceeded) {
					lastFetchErr = e
					log.Warn("replay fetch error", "topic", t, "partition", part, "err", e)
				}
			})
			progressed := false
			fs.EachPartition(func(fp kgo.FetchTopicPartition) {
				if fp.Err == nil {
					contact = time.Now()
				}
				end, ok := left[fp.Partition]
				if !ok {
					return
				}
				for _, r := range fp.Records {
					if r.Offset >= end {
						break
					}
					progressed = true
					pos[fp.Partition] = r.Offset + 1
					if r.Attrs.IsControl() {
						// Commit/abort markers are kept so a partition whose
						// tail is a marker still reaches its end offset.
						if r.Offset+1 >= end {
							delete(left, fp.Partition)
						}
						continue
					}
					if ferr := p.FeedRecord(srcName, processors.Record{Partition: r.Partition, Offset: r.Offset, Key: r.Key,
						Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}); ferr != nil && err == nil {
						err = ferr
					}
					prog.Records++
				}
				if n := len(fp.Records); n > 0 && fp.Records[n-1].Offset+1 >= end {
					delete(left, fp.Partition)
				}
			})
			if err != nil {
				return prog, err
			}
			if progressed {
				quietSince = time.Now()
			} else if time.Since(quietSince) >= stallCheck {
				// Nothing visible arrived for a while: the broker is slow, or
				// what is left before the end offsets is aborted (its records
				// are filtered out and its markers lie past the end). Ask the
				// broker which; never guess from the silence alone.
				quietSince = time.Now()
				for part, end := range left {
					done, perr := tailInvisible(ctx, cl, adm, src.Topic, part, pos[part], end, timeout)
					if perr != nil {
						lastFetchErr = perr
						log.Warn("replay: cannot check the rest of a partition", "topic", src.Topic, "partition", part, "err", perr)
						continue
					}
					contact = time.Now()
					if done {
						log.Info("replay: the rest of the partition before its end offset is aborted", "topic", src.Topic, "partition", part, "from", pos[part], "end", end)
						delete(left, part)
					} else {
						log.Info("replay: waiting for the broker; records remain before the end offset", "topic", src.Topic, "partition", part, "at", pos[part], "end", end)
					}
				}
			}
			if time.Since(contact) > timeout {
				return prog, fmt.Errorf("replay: no answer from the brokers %v for %s while reading %s (last error: %v); the result would be incomplete, so nothing more is read: check that the brokers are up and reachable, or raise --timeout", brokers, timeout, src.Topic, lastFetchErr)
			}
			if o.Progress != nil && time.Since(lastReport) >= time.Second {
				lastReport = time.Now()
				prog.Elapsed = time.Since(start)
				prog.Lag = map[int32]int64{}
				for part, end := range left {
					prog.Lag[part] = end - pos[part]
				}
				o.Progress(prog)
			}
		}
		cl.RemoveConsumePartitions(map[string][]int32{src.Topic: slices.Collect(maps.Keys(offsets))})
	}
	prog.Elapsed, prog.Lag = time.Since(start), nil
	if o.Progress != nil {
		o.Progress(prog)
	}
	return prog, o.Out.Close(ctx)
}

func nextOffset(fp kgo.FetchTopicPartition) int64 {
	if n := len(fp.Records); n > 0 {
		return fp.Records[n-1].Offset + 1
	}
	return -1
}

type partRange struct {
	partition  int32
	start, end int64
}

// resolveRange turns the replay bounds into offsets per partition. The end
// offsets are the last stable offsets seen now: a replay is bounded.
func resolveRange(ctx context.Context, adm *kadm.Client, topic string, o ReplayOptions, warm time.Duration) ([]partRange, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	byTime := func(t time.Time) (kadm.ListedOffsets, error) {
		return adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic)
	}
	var fromT, toT kadm.ListedOffsets
	if o.From.Kind == BoundTime {
		if fromT, err = byTime(o.From.Time.Add(-warm)); err != nil {
			return nil, err
		}
	}
	if o.To.Kind == BoundTime {
		if toT, err = byTime(o.To.Time); err != nil {
			return nil, err
		}
	}
	want := map[int32]bool{}
	for _, p := range o.Partitions {
		want[p] = true
	}
	var out []partRange
	for _, so := range starts[topic] {
		if len(want) > 0 && !want[so.Partition] {
			continue
		}
		eo, _ := ends.Lookup(topic, so.Partition)
		r := partRange{partition: so.Partition, start: so.Offset, end: eo.Offset}
		switch o.From.Kind {
		case BoundOffset:
			r.start = max(r.start, o.From.Offset)
		case BoundTime:
			if f, ok := fromT.Lookup(topic, so.Partition); ok && f.Offset >= 0 {
				r.start = max(r.start, f.Offset)
			}
		}
		switch o.To.Kind {
		case BoundOffset:
			r.end = min(r.end, o.To.Offset)
		case BoundTime:
			if e, ok := toT.Lookup(topic, so.Partition); ok && e.Offset >= 0 {
				r.end = min(r.end, e.Offset)
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].partition < out[j].partition })
	return out, nil
}

// defaultWarmup is the longest window of any stage plus its lateness.
func defaultWarmup(g *graph) time.Duration {
	var w time.Duration
	ref := time.Date(2024, 1, 31, 0, 0, 0, 0, time.UTC).UnixMilli() // a 31-day month
	for _, s := range g.stages {
		open := s.Timeframe.Start(ref)
		d := time.Duration(s.Timeframe.End(open)-open)*time.Millisecond + time.Hour
		if s.Processor != nil {
			d += s.Processor.Lateness
		}
		w = max(w, d)
	}
	return w
}

// TopicOutput writes replay results to the topology's own topics (candles
// keyed and partitioned as the live stages key them, dead letters to the
// dead-letter topic).
type TopicOutput struct {
	cl       *kgo.Client
	dlq      string
	byWindow map[string]bool // output topics whose candles are keyed symbol@open_time
	err      error
}

// NewTopicOutput produces to brokers, with t's TLS and SASL settings. It
// creates the output and dead-letter topics that do not exist yet (with the
// topology's partition counts) before anything is read, so a replay into a
// fresh cluster never does all its work only to fail at the end. timeout
// bounds the wait for brokers that do not answer (0: DefaultReplayTimeout);
// log receives warnings about existing topics (nil: slog.Default()).
func NewTopicOutput(ctx context.Context, t *topology.Topology, brokers []string, timeout time.Duration, log *slog.Logger) (*TopicOutput, error) {
	if log == nil {
		log = slog.Default()
	}
	g, err := buildGraph(t)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultReplayTimeout
	}
	byWindow := map[string]bool{}
	var windowed []string
	for _, s := range g.stages {
		if s.byWindow() && !byWindow[s.OutputTopic] {
			byWindow[s.OutputTopic] = true
			windowed = append(windowed, s.OutputTopic)
		}
	}
	cl, err := newClient(t, brokers, kgo.ProducerLinger(5*time.Millisecond), kgo.RecordDeliveryTimeout(timeout),
		kgo.RecordPartitioner(outputPartitioner(nil, windowed)))
	if err != nil {
		return nil, err
	}
	if err := reachable(ctx, cl, brokers, timeout); err != nil {
		cl.Close()
		return nil, err
	}
	var specs []kafka.TopicSpec
	seen := map[string]bool{}
	for _, s := range g.stages {
		if !seen[s.OutputTopic] {
			seen[s.OutputTopic] = true
			specs = append(specs, kafka.TopicSpec{Name: s.OutputTopic, Partitions: int32(s.OutputParts)})
		}
	}
	if dlq := g.deadLetterTopic(); dlq != "" && !seen[dlq] {
		specs = append(specs, kafka.TopicSpec{Name: dlq, Partitions: int32(max(t.DeadLetter.Partitions, 1))})
	}
	ectx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	warnings, err := kafka.EnsureTopics(ectx, cl, specs)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("replay: create the output and dead-letter topics: %w", kafka.Explain(err, t.Kafka))
	}
	for _, w := range warnings {
		log.Warn("replay output topic", "warning", w)
	}
	return &TopicOutput{cl: cl, dlq: g.deadLetterTopic(), byWindow: byWindow}, nil
}

func (o *TopicOutput) promise(_ *kgo.Record, err error) {
	if err != nil && o.err == nil {
		o.err = err
	}
}

// Candle produces c to topic, keyed as the live stage keys it.
func (o *TopicOutput) Candle(_ string, topic string, c *candle.Candle) error {
	key := []byte(c.Symbol)
	if o.byWindow[topic] {
		key = appendWindowKey(nil, c)
	}
	o.cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: key, Value: c.AppendJSON(nil)}, o.promise)
	return o.err
}

// DeadLetter produces the rejection to the dead-letter topic.
func (o *TopicOutput) DeadLetter(stage string, r *processors.Rejection) error {
	o.cl.Produce(context.Background(), deadLetter(o.dlq, stage, "", r), o.promise)
	return o.err
}

// Close flushes and closes the producer.
func (o *TopicOutput) Close(ctx context.Context) error {
	defer o.cl.Close()
	if err := o.cl.Flush(ctx); err != nil {
		return err
	}
	return o.err
}

// WriterOutput writes replay results as JSON lines: candles as they are on
// the topics plus a "stage" field is not added, so lines compare byte for
// byte with the topic contents; dead letters are prefixed "dlq ".
type WriterOutput struct {
	W   io.Writer
	buf []byte
}

// Candle writes one JSON line.
func (o *WriterOutput) Candle(_ string, _ string, c *candle.Candle) error {
	o.buf = append(c.AppendJSON(o.buf[:0]), '\n')
	_, err := o.W.Write(o.buf)
	return err
}

// DeadLetter writes "dlq <envelope>".
func (o *WriterOutput) DeadLetter(stage string, r *processors.Rejection) error {
	rec := deadLetter("", stage, "", r)
	_, err := fmt.Fprintf(o.W, "dlq %s\n", rec.Value)
	return err
}

// Close does nothing.
func (o *WriterOutput) Close(context.Context) error { return nil }
