package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// RejectedCandles is implemented by sink errors that refuse some candles for
// good (for example an item over DynamoDB's size limit): those candles go to
// the dead-letter topic with reason sink_rejected, and the rest of the batch
// counts as written. It is sinkkit's one rejected-record contract.
type RejectedCandles = sinkkit.RejectedCandles

// RejectedTrades is the same for trade sinks (the raw ledger).
type RejectedTrades = sinkkit.RejectedTrades

// ReasonSinkRejected is the dead-letter reason of records a sink refused for
// good; the detail says why. (Input records use the processors' reasons.)
const ReasonSinkRejected processors.Reason = "sink_rejected"

// sinkStage feeds one sink from output topics (candles) or a source topic
// (trades), at least once: offsets commit only after the sink flushed.
type sinkStage struct {
	name         string
	e            *Engine
	log          *slog.Logger
	sink         CandleSink
	trades       TradeSink
	dec          *processors.Decoder
	cl           *kgo.Client
	every        time.Duration
	candleTopics map[string]bool // output topics this sink reads (the rest are trade sources)
	eventTopics  map[string]bool // output topics of event processors (kind silence)
	events       EventSink
	closes       []int64 // close times of candles written since the last flush (for the delay histogram)

	mu      sync.Mutex // held by the loop while it works and by the revoke callback
	runCtx  context.Context
	pending []*kgo.Record // taken, written, not yet flushed and committed
	last    time.Time     // of the last flush
}

func newSinkStage(e *Engine, name string, sk *topology.Sink, sink CandleSink) (*sinkStage, error) {
	s := &sinkStage{name: name, e: e, log: e.log.With("sink", name), sink: sink, every: 10 * e.commitInterval}
	if fi, ok := sink.(interface{ FlushInterval() time.Duration }); ok && fi.FlushInterval() > s.every {
		// A sink that rewrites objects per flush (S3) says how often it wants
		// to: offsets then commit at that pace, after each flush.
		s.every = fi.FlushInterval()
	}
	var topics []string
	s.candleTopics = map[string]bool{}
	for _, from := range sk.From {
		if st, ok := e.g.byName[from]; ok {
			topics = append(topics, st.OutputTopic)
			if !st.Facts.Candles {
				if err := s.takeEvents(sk, st); err != nil {
					return nil, err
				}
				continue
			}
			s.candleTopics[st.OutputTopic] = true
			continue
		}
		src, ok := e.top.Sources[from]
		if !ok {
			return nil, fmt.Errorf("sink %s: from %q is neither a processor nor a source", name, from)
		}
		ts, ok := sink.(TradeSink)
		if !ok {
			return nil, fmt.Errorf("sink %s: kind %s cannot take trades from source %q; feed it processors", name, sk.Kind, from)
		}
		dec, err := processors.NewDecoder(decoderConfig(src))
		if err != nil {
			return nil, err
		}
		s.trades, s.dec = ts, dec
		topics = append(topics, src.Topic)
	}
	cl, err := kgo.NewClient(append(e.kafkaOpts(e.clientID(), kgo.ConsumerGroup(e.g.groupID("sink."+name)),
		kgo.ConsumeTopics(topics...), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		// The same session as the processor stages: without it kgo's 45 s
		// default would keep a crashed instance's sink partitions idle that long.
		kgo.SessionTimeout(e.sessionTimeout),
		// One writer per object: partitions move only between loop turns,
		// and the revoke callback flushes and commits everything taken
		// before they go, so the next owner starts where this one durably
		// stopped and its read-merge-write of an object (S3 Parquet) never
		// races this instance's. (A write of an instance cut off while it
		// hung, landing late, is fenced by the S3 sink's conditional PUTs.)
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned), kgo.OnPartitionsRevoked(s.revoked), kgo.OnPartitionsLost(s.moved),
		kgo.WithLogger(kgoLogger(s.log))), e.member()...)...)
	if err != nil {
		return nil, fmt.Errorf("sink %s: kafka client: %w", name, err)
	}
	s.cl = cl
	return s, nil
}

// moved forgets the lag of partitions this sink no longer reads.
func (s *sinkStage) moved(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for t, ps := range m {
		s.e.health.moved("sink "+s.name, t, ps)
	}
}

// assigned logs partitions this sink starts to read.
func (s *sinkStage) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for t, ps := range m {
		s.log.Info("sink partitions assigned", "instance", s.e.instance, "topic", t, "partitions", ps)
	}
}

// revoked flushes the sink and commits what it took before partitions leave
// this instance (the loop is not working meanwhile: rebalances wait for
// AllowRebalance), so their next owner starts from durable offsets.
func (s *sinkStage) revoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	if len(s.pending) > 0 && s.runCtx != nil {
		if err := s.flushAndCommit(s.runCtx, s.pending); err != nil {
			s.log.Warn("flush before giving up partitions failed; the next owner rewrites from the last commit", "err", err)
		}
		s.pending, s.last = s.pending[:0], time.Now()
	}
	s.mu.Unlock()
	for t, ps := range m {
		s.log.Info("sink partitions revoked", "instance", s.e.instance, "topic", t, "partitions", ps)
	}
	s.moved(ctx, cl, m)
}

func (s *sinkStage) run(ctx context.Context) error {
	defer s.cl.Close()
	s.mu.Lock()
	s.runCtx, s.last = ctx, time.Now()
	s.mu.Unlock()
	for {
		pollCtx, cancel := context.WithTimeout(ctx, s.every)
		fs := s.cl.PollFetches(pollCtx)
		cancel()
		if fs.IsClientClosed() {
			return nil
		}
		if err := s.turn(ctx, fs); err != nil {
			s.cl.AllowRebalance()
			return s.stop(err)
		}
		s.cl.AllowRebalance()
		if ctx.Err() != nil {
			return s.stop(nil)
		}
	}
}

// turn takes one poll's records: writes them, and flushes and commits when
// the flush interval has passed or the stage stops.
func (s *sinkStage) turn(ctx context.Context, fs kgo.Fetches) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	var candles []candle.Candle
	var trades []candle.Trade
	var events [][]byte
	fs.EachRecord(func(r *kgo.Record) {
		s.pending = append(s.pending, r)
		if s.eventTopics[r.Topic] {
			events = append(events, r.Value)
			return
		}
		if s.dec != nil && !s.candleTopics[r.Topic] {
			var t candle.Trade
			if _, ok := s.dec.Decode(r.Value, &t); ok {
				trades = append(trades, t)
			}
			return
		}
		if IsQuietRecord(r) {
			return // a control record for rollups (quiet.go), not a candle
		}
		c, err := candle.ParseJSON(r.Value)
		if err != nil { // never silently: dead-lettered with where it came from
			s.log.Warn("dead-lettering an unreadable candle", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			rej := &processors.Rejection{Reason: processors.ReasonMalformedJSON, Detail: "sink " + s.name + ": unreadable candle: " + err.Error(),
				Key: string(r.Key), Value: r.Value, Partition: r.Partition, Offset: r.Offset}
			if perr := s.cl.ProduceSync(ctx, deadLetter(s.e.g.deadLetterTopic(), "sink."+s.name, r.Topic, rej)).FirstErr(); perr != nil {
				s.log.Error("dead-letter write failed", "err", perr)
			}
			s.e.m.rejected.WithLabelValues("sink."+s.name, string(processors.ReasonMalformedJSON)).Inc()
			s.e.m.sinkErrors.WithLabelValues(s.name).Inc()
			return
		}
		candles = append(candles, c)
	})
	if err := s.write(ctx, candles, trades); err != nil {
		return err
	}
	if err := s.writeEvents(ctx, events); err != nil {
		return err
	}
	if len(s.pending) > 0 && (time.Since(s.last) >= s.every || ctx.Err() != nil) {
		if err := s.flushAndCommit(ctx, s.pending); err != nil {
			return err
		}
		s.pending, s.last = s.pending[:0], time.Now()
	}
	s.e.health.turn("sink "+s.name, s.cl, fs)
	return nil
}

// write retries until the sink takes the batch or ctx ends; candles the sink
// refuses for good are dead-lettered.
func (s *sinkStage) write(ctx context.Context, cs []candle.Candle, ts []candle.Trade) error {
	if len(cs) > 0 {
		err := s.retry(ctx, "write candles", func() error { return s.sink.Write(ctx, cs) })
		var rej RejectedCandles
		if errors.As(err, &rej) {
			s.deadLetter(ctx, rej)
			err = nil
		}
		if err != nil {
			return err
		}
		s.e.m.sinkWritten.WithLabelValues(s.name).Add(float64(len(cs)))
		for i := range cs {
			s.closes = append(s.closes, cs[i].CloseTime)
		}
	}
	if len(ts) > 0 {
		err := s.retry(ctx, "write trades", func() error { return s.trades.WriteTrades(ctx, ts) })
		var rej RejectedTrades
		if errors.As(err, &rej) {
			for _, t := range rej.Trades() {
				s.deadLetterRecord(ctx, t.Key, tradeJSON(t), rej.Error())
			}
			err = nil
		}
		if err != nil {
			return err
		}
		s.e.m.sinkWritten.WithLabelValues(s.name).Add(float64(len(ts)))
	}
	return nil
}

func (s *sinkStage) deadLetter(ctx context.Context, rej RejectedCandles) {
	for _, c := range rej.Candles() {
		s.deadLetterRecord(ctx, c.Symbol, c.AppendJSON(nil), rej.Error())
	}
}

func (s *sinkStage) deadLetterRecord(ctx context.Context, key string, value []byte, why string) {
	r := &processors.Rejection{Reason: ReasonSinkRejected, Detail: "sink " + s.name + ": " + why,
		Key: key, Value: value, Partition: -1, Offset: -1}
	rec := deadLetter(s.e.g.deadLetterTopic(), "sink."+s.name, "", r)
	if err := s.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		s.log.Error("dead-letter write failed", "err", err)
	}
	s.e.m.rejected.WithLabelValues("sink."+s.name, string(ReasonSinkRejected)).Inc()
	s.e.m.sinkErrors.WithLabelValues(s.name).Inc()
}

func tradeJSON(t candle.Trade) []byte {
	b := []byte(`{"key":`)
	b = strconv.AppendQuote(b, t.Key)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, t.TS, 10)
	b = append(b, `,"price":"`...)
	b = t.Price.Append(b)
	b = append(b, `","qty":"`...)
	b = t.Qty.Append(b)
	b = append(b, `","id":`...)
	b = strconv.AppendQuote(b, t.ID)
	return append(b, '}')
}

func (s *sinkStage) flushAndCommit(ctx context.Context, recs []*kgo.Record) error {
	// A flush can refuse records for good too (a Valkey key of another
	// type, an item DynamoDB will not take): those are dead-lettered like
	// refusals at write time and the rest counts as written. Only the end
	// of ctx stops the stage, never one bad record.
	err := s.retry(ctx, "flush", func() error { return s.sink.Flush(ctx) })
	var rc RejectedCandles
	var rt RejectedTrades
	switch {
	case errors.As(err, &rc):
		s.deadLetter(ctx, rc)
		err = nil
	case errors.As(err, &rt):
		for _, t := range rt.Trades() {
			s.deadLetterRecord(ctx, t.Key, tradeJSON(t), rt.Error())
		}
		err = nil
	}
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	delay := s.e.m.sinkLag.WithLabelValues(s.name)
	for _, c := range s.closes {
		delay.Observe(float64(now-c) / 1000)
	}
	s.closes = s.closes[:0]
	cctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	if err := s.cl.CommitRecords(cctx, recs...); err != nil {
		s.log.Warn("offset commit failed; records will be delivered again", "err", err)
	}
	return nil
}

func (s *sinkStage) stop(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// retry runs fn until it succeeds, returns a RejectedCandles or
// RejectedTrades error, or ctx ends, pausing with the shared sink backoff:
// an outage pauses the stage (it polls nothing meanwhile, so memory stays
// bounded and lag grows instead) and never drops data. While fn fails the
// sink counts as unreachable for the readiness probe.
func (s *sinkStage) retry(ctx context.Context, what string, fn func() error) error {
	loop := "sink " + s.name
	policy := sinkkit.Backoff{Min: sinkkit.DefaultMin, Max: sinkkit.DefaultMax}
	for attempt := 1; ; attempt++ {
		err := fn()
		var rc RejectedCandles
		var rt RejectedTrades
		if err == nil || errors.As(err, &rc) || errors.As(err, &rt) {
			if attempt > 1 {
				s.e.health.sinkDown(loop, "")
				s.log.Info("sink recovered", "what", what, "attempts", attempt)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.e.health.sinkDown(loop, fmt.Sprintf("%s failing: %v", what, err))
		s.log.Warn("sink call failed; retrying", "what", what, "attempt", attempt, "err", err)
		if err := sinkkit.Sleep(ctx, policy.Delay(attempt-1)); err != nil {
			return err
		}
	}
}
