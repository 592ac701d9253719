package main

// The stores a cluster's instances write after cluster.startSinks: a
// DynamoDB candle table (dynalite), live Valkey hashes and channels
// (redis-server) and a Parquet lake on S3 (gofakes3 in process), each fed
// every candle topic by the instances' own sink stages, and the check that
// every store ends with the newest revision of every window the replay
// closed.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/dynamodb"
	"github.com/kandle/kandle/connectors/s3parquet"
	vksink "github.com/kandle/kandle/connectors/valkey"
	"github.com/kandle/kandle/decimal"
	"github.com/kandle/kandle/engine"
	"github.com/kandle/kandle/internal/testkit"
)

// clusterSinks are the servers behind a cluster's sinks (startSinks) and
// what the test reads back. The candle stages are split into sets with one
// stage per timeframe (two stages of one timeframe, such as a 1m rollup and
// a direct 1m stage, would write the same keys); set i writes the DynamoDB
// table candles<i>, the Valkey keys and channels prefixed s<i>: and the
// lake s3://lake/s<i>.
type clusterSinks struct {
	c          *cluster
	ddb, redis *testkit.Service
	s3         *sxS3
	sets       [][]sinkStage
	raw        valkey.Client

	mu        sync.Mutex
	published map[sinkWindow][]vksink.Message // the finals of each window, in the order received
}

// sinkStage is one candle processor a set's sinks read.
type sinkStage struct{ proc, topic, tf string }

// sinkWindow is one window of one set's store (open 0: the whole series).
type sinkWindow struct {
	set     int
	tf, sym string
	open    int64
}

// sinkSets splits stages into sets without two stages of one timeframe,
// keeping their order.
func sinkSets(stages []sinkStage) [][]sinkStage {
	var sets [][]sinkStage
	seen := map[string]int{} // timeframe → sets using it
	for _, st := range stages {
		n := seen[st.tf]
		seen[st.tf]++
		if n == len(sets) {
			sets = append(sets, nil)
		}
		sets[n] = append(sets[n], st)
	}
	return sets
}

// startSinks starts the three servers, adds to the instances' topology a
// DynamoDB, a Valkey and an S3 Parquet sink per set reading every candle
// topic of the shape, and subscribes to the channel of every (set,
// timeframe, symbol). Call it before any instance starts; the replay's
// topology has no sinks. The sinks keep their shipped settings but the
// lake's flush_age (1s instead of 30s, so the test does not wait for it).
func (c *cluster) startSinks() *clusterSinks {
	t := c.t
	t.Helper()
	top, err := loadTopology(c.topFile)
	if err != nil {
		t.Fatal(err)
	}
	var stages []sinkStage
	for _, tp := range c.opts.shape.candleTopics {
		var st sinkStage
		for name, p := range top.Processors {
			if p.Output.Topic == tp {
				st = sinkStage{name, tp, p.Timeframe}
			}
		}
		if st.proc == "" {
			t.Fatalf("no processor of %s writes %s", c.topFile, tp)
		}
		stages = append(stages, st)
	}
	s := &clusterSinks{c: c, ddb: testkit.Dynalite(t), redis: testkit.Redis(t), s3: newSXS3(t, "lake"),
		sets: sinkSets(stages), published: map[sinkWindow][]vksink.Message{}}
	if s.raw, err = valkey.NewClient(valkey.ClientOption{InitAddress: []string{s.redis.Addr}, DisableCache: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var readers []*vksink.Reader
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, r := range readers {
			r.Close()
		}
		s.raw.Close()
	})

	var b strings.Builder
	b.WriteString("sinks:\n")
	for set, sts := range s.sets {
		var from []string
		for _, st := range sts {
			from = append(from, st.proc)
		}
		fmt.Fprintf(&b, `  ddb%[1]d: {kind: dynamodb, from: [%[2]s], endpoint: %[3]s, provision: true, table: {name: candles%[1]d}}
  live%[1]d: {kind: valkey, from: [%[2]s], addrs: [%[4]s], key_prefix: "s%[1]d:"}
  lake%[1]d: {kind: s3parquet, from: [%[2]s], url: s3://lake/s%[1]d, endpoint: %[5]s, path_style: true, flush_age: 1s}
`, set, strings.Join(from, ", "), s.ddb.URL(), s.redis.Addr, s.s3.url())

		cfg := vksink.DefaultConfig(s.redis.Addr)
		cfg.KeyPrefix = fmt.Sprintf("s%d:", set)
		r, err := vksink.NewReader(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
		wg.Go(func() {
			_ = r.Run(ctx, func(m vksink.Message) {
				if !m.Final {
					return
				}
				w := sinkWindow{set, m.Candle.Timeframe, m.Candle.Symbol, m.Candle.OpenTime}
				s.mu.Lock()
				s.published[w] = append(s.published[w], m)
				s.mu.Unlock()
			})
		})
		for _, st := range sts {
			for _, sym := range clusterSymbols {
				if err := r.Subscribe(ctx, sym, st.tf); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	f, err := os.OpenFile(c.topFile, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(b.String())
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatalf("add the sinks to %s: %v", c.topFile, err)
	}
	return s
}

// topicRevs reads the live candle topic tp and returns the highest rev of
// each window on it.
func (c *cluster) topicRevs(tp string) map[window]uint32 {
	revs := map[window]uint32{}
	for _, r := range testkit.ReadTopic(c.t, []string{c.addr}, tp) {
		if engine.IsQuietRecord(r) {
			continue
		}
		cd, err := candle.ParseJSON(r.Value)
		if err != nil {
			continue // diffLive reports it
		}
		w := window{cd.Symbol, cd.OpenTime}
		revs[w] = max(revs[w], cd.Rev)
	}
	return revs
}

// wait polls the stores until each holds, for every window the replay
// closed, the replay's candle with the highest rev the live topic has for
// that window, or fails with the differences after within. Called once the
// live topics equal the replay (waitExact).
//
//   - DynamoDB (the sink's Range query) and the lake (s3parquet's Reader,
//     as kandle serve reads it) hold exactly those candles in the replay's
//     range of each series, each window once, nothing more.
//   - Valkey: the last final published for each window is that candle, the
//     finals a subscriber received for a window never went down in rev and
//     none was above the topic's, the window's revision guard holds its rev
//     when it was revised, and each active hash holds a window no older than
//     the replay's last (its candle when it is one of those windows).
func (s *clusterSinks) wait(want map[string][]string, within time.Duration) {
	c := s.c
	c.t.Helper()
	exp := map[sinkWindow]candle.Candle{}
	span := map[sinkWindow][2]int64{} // per (set, tf, symbol), open 0: the replay's first and last window
	revised := 0
	for set, sts := range s.sets {
		for _, st := range sts {
			tp := st.topic
			revs := c.topicRevs(tp)
			for _, v := range want[tp] {
				cd, err := candle.ParseJSON([]byte(v))
				if err != nil {
					continue
				}
				cd.Rev = revs[window{cd.Symbol, cd.OpenTime}]
				if cd.Rev > 0 {
					revised++
				}
				exp[sinkWindow{set, cd.Timeframe, cd.Symbol, cd.OpenTime}] = cd
				k := sinkWindow{set, cd.Timeframe, cd.Symbol, 0}
				sp, ok := span[k]
				if !ok {
					sp = [2]int64{cd.OpenTime, cd.OpenTime}
				}
				span[k] = [2]int64{min(sp[0], cd.OpenTime), max(sp[1], cd.OpenTime)}
			}
		}
	}
	c.logf("sinks: waiting for %d windows (%d revised) in DynamoDB, Valkey and S3", len(exp), revised)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	rd := s.readers(ctx)
	deadline := time.Now().Add(within)
	for {
		c.checkNoSelfExit()
		probs := s.problems(rd, exp, span)
		if len(probs) == 0 {
			c.logf("sinks: every store holds the newest revision of all %d windows (%d revised)", len(exp), revised)
			return
		}
		if time.Now().After(deadline) {
			n := len(probs)
			if n > 30 {
				probs = append(probs[:30], fmt.Sprintf("… and %d more", n-30))
			}
			c.t.Fatalf("the stores differ from the newest revisions on the topics after %s (%d problems):\n%s", within, n, strings.Join(probs, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// storeReaders are the connectors' own readers of one set's stores, made
// from the sinks' configuration in the instances' topology.
type storeReaders struct {
	ddb  *dynamodb.Sink
	lake *s3parquet.Reader
	live *vksink.Reader
}

func (s *clusterSinks) readers(ctx context.Context) []storeReaders {
	c := s.c
	c.t.Helper()
	tp, err := loadTopology(c.topFile)
	if err != nil {
		c.t.Fatal(err)
	}
	out := make([]storeReaders, len(s.sets))
	for set := range s.sets {
		r := &out[set]
		if r.ddb, err = dynamodb.New(ctx, *tp.Sinks[fmt.Sprintf("ddb%d", set)].Config.(*dynamodb.Config)); err != nil {
			c.t.Fatalf("dynamodb reader of set %d: %v", set, err)
		}
		c.t.Cleanup(func() { _ = r.ddb.Close(context.Background()) })
		if r.lake, err = s3parquet.NewReader(ctx, *tp.Sinks[fmt.Sprintf("lake%d", set)].Config.(*s3parquet.Config)); err != nil {
			c.t.Fatalf("lake reader of set %d: %v", set, err)
		}
		if r.live, err = vksink.NewReader(ctx, *tp.Sinks[fmt.Sprintf("live%d", set)].Config.(*vksink.Config), nil); err != nil {
			c.t.Fatalf("valkey reader of set %d: %v", set, err)
		}
		c.t.Cleanup(r.live.Close)
	}
	return out
}

// problems lists how the stores differ from exp (see clusterSinks.wait).
func (s *clusterSinks) problems(rd []storeReaders, exp map[sinkWindow]candle.Candle, span map[sinkWindow][2]int64) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var probs []string
	for k, sp := range span {
		r := rd[k.set]
		cs, err := r.ddb.Reader().Range(ctx, k.sym, k.tf, sp[0], sp[1]+1)
		probs = append(probs, compareStore("dynamodb", k, exp, cs, err)...)
		tf, err := candle.ParseTimeframe(k.tf, nil)
		if err != nil {
			s.c.t.Fatal(err)
		}
		cs, err = r.lake.Candles(ctx, k.sym, tf, sp[0], sp[1]+1, 0, false)
		probs = append(probs, compareStore("s3", k, exp, cs, err)...)
		probs = append(probs, s.valkeyProblems(ctx, r.live, k, sp, exp)...)
	}
	sort.Strings(probs)
	return probs
}

// compareStore compares the candles a store returned for the series k in
// the replay's range with exp.
func compareStore(store string, k sinkWindow, exp map[sinkWindow]candle.Candle, got []candle.Candle, err error) []string {
	if err != nil {
		return []string{fmt.Sprintf("%s %s %s: %v", store, k.tf, k.sym, err)}
	}
	var probs []string
	seen := map[int64]bool{}
	for _, g := range got {
		w := sinkWindow{k.set, k.tf, k.sym, g.OpenTime}
		e, ok := exp[w]
		switch {
		case seen[g.OpenTime]:
			probs = append(probs, fmt.Sprintf("%s holds %s twice", store, sinkName(w)))
		case !ok:
			probs = append(probs, fmt.Sprintf("%s holds %s, a window the replay does not have: %s", store, sinkName(w), sxJSON(g)))
		case sxJSON(g) != sxJSON(e):
			probs = append(probs, fmt.Sprintf("%s %s:\n  got  %s\n  want %s", store, sinkName(w), sxJSON(g), sxJSON(e)))
		}
		seen[g.OpenTime] = true
	}
	for w := range exp {
		if w.set == k.set && w.tf == k.tf && w.sym == k.sym && !seen[w.open] {
			probs = append(probs, fmt.Sprintf("%s lacks %s", store, sinkName(w)))
		}
	}
	return probs
}

// valkeyProblems checks the finals published for the series k, the
// revision guards of its revised windows and its active hash.
func (s *clusterSinks) valkeyProblems(ctx context.Context, live *vksink.Reader, k sinkWindow, sp [2]int64, exp map[sinkWindow]candle.Candle) []string {
	var probs []string
	s.mu.Lock()
	for w, e := range exp {
		if w.set != k.set || w.tf != k.tf || w.sym != k.sym {
			continue
		}
		probs = append(probs, publishedProblems(w, s.published[w], e)...)
		if e.Rev > 0 {
			g, err := s.raw.Do(ctx, s.raw.B().Get().Key(fmt.Sprintf("s%d:candle:rev:%s:%s:%d", w.set, w.tf, w.sym, w.open)).Build()).ToString()
			if g != strconv.FormatUint(uint64(e.Rev), 10) {
				probs = append(probs, fmt.Sprintf("valkey's revision guard of %s holds %q (%v), want %d", sinkName(w), g, err, e.Rev))
			}
		}
	}
	s.mu.Unlock()
	a, ok, err := live.Active(ctx, k.sym, k.tf)
	switch {
	case err != nil:
		probs = append(probs, fmt.Sprintf("valkey %s %s: %v", k.tf, k.sym, err))
	case !ok:
		probs = append(probs, fmt.Sprintf("valkey has no active hash of %s %s", k.tf, k.sym))
	case a.OpenTime < sp[1]:
		probs = append(probs, fmt.Sprintf("valkey's active hash of %s %s went back to %s, before the replay's last window %s",
			k.tf, k.sym, time.UnixMilli(a.OpenTime).UTC().Format("15:04:05"), time.UnixMilli(sp[1]).UTC().Format("15:04:05")))
	case a.OpenTime == sp[1] && sxJSON(a) != sxJSON(exp[sinkWindow{k.set, k.tf, k.sym, a.OpenTime}]):
		probs = append(probs, fmt.Sprintf("valkey's active hash of %s %s:\n  got  %s\n  want %s", k.tf, k.sym, sxJSON(a), sxJSON(exp[sinkWindow{k.set, k.tf, k.sym, a.OpenTime}])))
	}
	return probs
}

// publishedProblems checks the finals a subscriber received for the
// window w, in order, against its newest candle e: at least one, revs
// never going down nor above e's, and the last one e.
func publishedProblems(w sinkWindow, msgs []vksink.Message, e candle.Candle) []string {
	if len(msgs) == 0 {
		return []string{fmt.Sprintf("valkey published no final of %s", sinkName(w))}
	}
	var probs []string
	for i, m := range msgs {
		if i > 0 && m.Candle.Rev < msgs[i-1].Candle.Rev {
			probs = append(probs, fmt.Sprintf("valkey published %s rev %d after rev %d", sinkName(w), m.Candle.Rev, msgs[i-1].Candle.Rev))
		}
		if m.Candle.Rev > e.Rev {
			probs = append(probs, fmt.Sprintf("valkey published %s rev %d, above the topic's newest (%d)", sinkName(w), m.Candle.Rev, e.Rev))
		}
	}
	if last := msgs[len(msgs)-1].Candle; sxJSON(last) != sxJSON(e) {
		probs = append(probs, fmt.Sprintf("valkey's last final of %s:\n  got  %s\n  want %s", sinkName(w), sxJSON(last), sxJSON(e)))
	}
	return probs
}

func sinkName(w sinkWindow) string {
	return fmt.Sprintf("set %d %s %s %s", w.set, w.tf, w.sym, time.UnixMilli(w.open).UTC().Format("15:04:05"))
}

// The store checks find a store that lacks a window, holds one twice, holds
// an older revision (equal values, lower rev) or a window the replay does
// not have, and a subscriber's finals that go back in rev or end on an
// older revision; sinkSets keeps two stages of one timeframe apart.
func TestClusterSinkChecks(t *testing.T) {
	cnd := func(open int64, trades int, rev uint32) candle.Candle {
		return candle.Candle{Symbol: "BTC", Timeframe: "5s", OpenTime: open, CloseTime: open + 5000,
			Open: decimal.FromInt(1), High: decimal.FromInt(1), Low: decimal.FromInt(1), Close: decimal.FromInt(1),
			Volume: decimal.SumOf(decimal.FromInt(int64(trades))), QuoteVolume: decimal.SumOf(decimal.FromInt(int64(trades))),
			Trades: int64(trades), Gap: trades == 0, Rev: rev}
	}
	k := sinkWindow{0, "5s", "BTC", 0}
	exp := map[sinkWindow]candle.Candle{{0, "5s", "BTC", 0}: cnd(0, 2, 1), {0, "5s", "BTC", 5000}: cnd(5000, 3, 0)}
	for _, tc := range []struct {
		name string
		got  []candle.Candle
		want string // a substring of the problems ("" = none)
	}{
		{"equal", []candle.Candle{cnd(0, 2, 1), cnd(5000, 3, 0)}, ""},
		{"older revision", []candle.Candle{cnd(0, 2, 0), cnd(5000, 3, 0)}, "got  " + sxJSON(cnd(0, 2, 0))},
		{"missing", []candle.Candle{cnd(0, 2, 1)}, "lacks set 0 5s BTC 00:00:05"},
		{"twice", []candle.Candle{cnd(0, 2, 1), cnd(0, 2, 1), cnd(5000, 3, 0)}, "holds set 0 5s BTC 00:00:00 twice"},
		{"extra", []candle.Candle{cnd(0, 2, 1), cnd(5000, 3, 0), cnd(10000, 0, 0)}, "a window the replay does not have"},
	} {
		p := strings.Join(compareStore("s3", k, exp, tc.got, nil), "\n")
		if tc.want == "" && p != "" || tc.want != "" && !strings.Contains(p, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, p, tc.want)
		}
	}
	msg := func(c candle.Candle) vksink.Message { return vksink.Message{Candle: c, Final: true} }
	w := sinkWindow{0, "5s", "BTC", 0}
	for _, tc := range []struct {
		name string
		msgs []vksink.Message
		want string
	}{
		{"in order", []vksink.Message{msg(cnd(0, 1, 0)), msg(cnd(0, 2, 1)), msg(cnd(0, 2, 1))}, ""},
		{"none", nil, "published no final"},
		{"back", []vksink.Message{msg(cnd(0, 1, 0)), msg(cnd(0, 2, 1)), msg(cnd(0, 1, 0))}, "rev 0 after rev 1"},
		{"older last", []vksink.Message{msg(cnd(0, 1, 0))}, "last final"},
		{"above", []vksink.Message{msg(cnd(0, 2, 1)), msg(cnd(0, 2, 2))}, "above the topic's newest"},
	} {
		p := strings.Join(publishedProblems(w, tc.msgs, exp[w]), "\n")
		if tc.want == "" && p != "" || tc.want != "" && !strings.Contains(p, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, p, tc.want)
		}
	}
	sts := []sinkStage{{"c5s", "c.5s", "5s"}, {"c1m", "c.1m", "1m"}, {"d1m", "d.1m", "1m"}, {"d5s", "d.5s", "5s"}}
	if got := fmt.Sprint(sinkSets(sts)); got != "[[{c5s c.5s 5s} {c1m c.1m 1m}] [{d1m d.1m 1m} {d5s d.5s 5s}]]" {
		t.Errorf("sinkSets = %v: two stages of one timeframe in one set", got)
	}
}
