package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/internal/testkit"
)

// One Valkey key of the wrong type (a plain string where kandle keeps the
// hash of BTC-USD's hourly candle) is contained: its final candles go to the
// dead-letter topic with reason sink_rejected and why Valkey refused them
// (WRONGTYPE), kandle run keeps running, every other key of every sink is exact
// and the foreign key is left alone. (A rejection at flush time used to end
// the sink stage and with it the process.)
func TestSinkRejectionIsContained(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	cfg := sxStream(1500, 130*time.Minute)
	bad := cfg.Symbols[0]
	badKey := "candle:active:1h:" + bad
	if err := h.vk.Do(h.ctx, h.vk.B().Set().Key(badKey).Value("not a hash").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	h.startRun()
	h.produce(cfg, 0)
	// Every candle, the closers' too: a candle that reaches the topics after
	// want was read would be in the sinks but on no topic.
	want := h.waitSettled(cfg, 60*time.Second)
	wantRejected := map[string]bool{} // the finals of the foreign key, by sxKey
	others := map[string]candle.Candle{}
	for k, c := range want {
		if c.Timeframe == "1h" && c.Symbol == bad {
			wantRejected[k] = true
			continue
		}
		others[k] = c
	}
	if len(wantRejected) < 2 {
		t.Fatalf("only %d hourly candles of %s on the topics; the test needs several", len(wantRejected), bad)
	}
	ledger := wantLedger(t, cfg)

	deadline := time.Now().Add(60 * time.Second)
	for {
		var probs []string
		if got, err := h.dynamoCandles(want); err != nil {
			probs = append(probs, "dynamodb: "+err.Error())
		} else {
			probs = append(probs, diffCandles("dynamodb", want, got)...)
		}
		got, _, p := h.lakeCandles()
		probs = append(append(probs, p...), diffCandles("s3", want, got)...)
		probs = append(probs, h.liveProblems(others)...)
		probs = append(probs, h.ledgerProblems(ledger)...)
		probs = append(probs, h.rejectedProblems(wantRejected)...)
		if len(probs) == 0 {
			break
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s:\n%s", strings.Join(probs, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if v, err := h.vk.Do(h.ctx, h.vk.B().Get().Key(badKey).Build()).ToString(); err != nil || v != "not a hash" {
		t.Fatalf("the foreign key %s was changed: %q %v", badKey, v, err)
	}
	h.running()
}

// rejectedProblems compares the sink dead letters on sx.dlq with want (by
// sxKey): each must name the live sink, reason sink_rejected and the key of the wrong type.
func (h *sxHarness) rejectedProblems(want map[string]bool) []string {
	got := map[string]int{}
	var probs []string
	for _, r := range testkit.ReadTopic(h.t, []string{h.broker}, "sx.dlq") {
		var dl struct{ Reason, Detail, Stage, Record string }
		if err := json.Unmarshal(r.Value, &dl); err != nil {
			probs = append(probs, fmt.Sprintf("dead letter %s: %v", r.Value, err))
			continue
		}
		if dl.Stage != "sink.live" {
			continue // the stream's malformed records
		}
		c, err := candle.ParseJSON([]byte(dl.Record))
		if dl.Reason != "sink_rejected" || !strings.Contains(dl.Detail, "holds a non-hash value") || err != nil {
			probs = append(probs, fmt.Sprintf("dead letter of sink live: %s (%v)", r.Value, err))
			continue
		}
		got[sxKey(c)]++
	}
	for k := range want {
		if got[k] == 0 {
			probs = append(probs, "no sink_rejected dead letter for "+k)
		}
	}
	for k, n := range got {
		if !want[k] {
			probs = append(probs, fmt.Sprintf("candle %s dead-lettered %d times but not refused by Valkey", k, n))
		}
	}
	sort.Strings(probs)
	return probs
}

// A record on a candle topic that is not a candle (written there by
// something other than kandle) is never skipped silently: every sink
// reading that topic dead-letters it with reason malformed_json, its topic,
// partition and offset, and goes on.
func TestSinkDeadLettersUnreadableCandle(t *testing.T) {
	testkit.WallClockTest(t)
	h := newSXHarness(t)
	defer h.shutdown()
	h.startRun()
	cl := h.kgo()
	rec := &kgo.Record{Topic: "sx.1h", Key: []byte("BTC-USD"), Value: []byte(`{"symbol":"BTC-USD","open":`)}
	for deadline := time.Now().Add(30 * time.Second); ; { // the topic exists once kandle created it
		if err := cl.ProduceSync(h.ctx, rec).FirstErr(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("produce to sx.1h: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	want := map[string]bool{"sink.history": true, "sink.lake": true, "sink.live": true}
	for deadline := time.Now().Add(30 * time.Second); ; {
		got := map[string]bool{}
		for _, r := range testkit.ReadTopic(t, []string{h.broker}, "sx.dlq") {
			var dl struct {
				Reason, Stage, Topic, Record string
				Partition                    int32
				Offset                       int64
			}
			if json.Unmarshal(r.Value, &dl) == nil && dl.Reason == "malformed_json" && dl.Topic == "sx.1h" &&
				dl.Partition == rec.Partition && dl.Offset == rec.Offset && dl.Record == string(rec.Value) {
				got[dl.Stage] = true
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		h.running()
		if time.Now().After(deadline) {
			t.Fatalf("dead letters of the unreadable candle from %v, want from %v", got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
