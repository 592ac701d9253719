package main

// The comparison of a live group's read-committed outputs with one
// uninterrupted `kandle replay` of the same input, shared by the crash
// harness, the fault tests and the live test.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// injectedID marks the trade ids of records a test sends on purpose with a
// bad clock or a bad key (see live_test.go); every other record is on time.
const injectedID = "inject-"

// window names one final candle: one (symbol, timeframe, open_time) of one topic.
type window struct {
	symbol string
	open   int64
}

// diffLive describes how the live outputs got differ from the replay's want
// ("" when they agree).
//
// Candles: a live group that is caught up and idle advances its watermarks
// with the wall clock (idle_timeout), a replay never does, so after the
// input ends the live group closes windows the replay leaves open. For each
// topic and symbol, every live candle up to the replay's last window of that
// symbol must equal the replay's exactly (nothing missing, nothing extra,
// nothing changed); live candles after it are later windows the replay did
// not close. Never, anywhere, may one window have two finals.
//
// Dead letters: equal as multisets (stage, reason, partition, offset and
// record).
func diffLive(want, got map[string][]string) string {
	var b strings.Builder
	for _, tp := range candleTopicsOf(want) {
		diffLiveCandles(&b, tp, want[tp], got[tp])
	}
	diffDeadLetters(&b, want["dlq"], got["dlq"])
	return b.String()
}

func diffLiveCandles(b *strings.Builder, tp string, want, got []string) {
	last := map[string]int64{}   // symbol → the replay's last open_time
	ref := map[window][]string{} // the replay's candles of each window (one, unless it has two finals)
	var order []window           // the replay's windows
	for _, v := range want {
		c, err := candle.ParseJSON([]byte(v))
		if err != nil {
			fmt.Fprintf(b, "%s: replay wrote a record that is not a candle: %s\n", tp, v)
			continue
		}
		w := window{c.Symbol, c.OpenTime}
		if len(ref[w]) == 0 {
			order = append(order, w)
		}
		ref[w] = append(ref[w], v)
		if o, ok := last[c.Symbol]; !ok || c.OpenTime > o {
			last[c.Symbol] = c.OpenTime
		}
	}
	live := map[window][]string{}
	later := 0
	var bad []string
	for _, v := range got {
		c, err := candle.ParseJSON([]byte(v))
		if err != nil {
			bad = append(bad, v)
			continue
		}
		w := window{c.Symbol, c.OpenTime}
		live[w] = append(live[w], v)
		if o, ok := last[c.Symbol]; !ok || c.OpenTime > o {
			later++
		}
	}
	var missing, changed, extra, doubled []window
	for _, w := range order {
		vs := slices.Sorted(slices.Values(live[w]))
		switch {
		case len(vs) == 0:
			missing = append(missing, w)
		case len(vs) > 1: // reported as more than one final
		case !slices.Equal(vs, ref[w]):
			changed = append(changed, w)
		}
	}
	for w, vs := range live {
		if len(vs) > 1 {
			doubled = append(doubled, w)
		}
		if _, ok := ref[w]; !ok {
			if o, ok := last[w.symbol]; ok && w.open <= o {
				extra = append(extra, w)
			}
		}
	}
	if len(missing)+len(changed)+len(extra)+len(doubled)+len(bad) == 0 {
		return
	}
	fmt.Fprintf(b, "%s: of the replay's %d windows %d differ and %d are missing; live has %d extra in the replay's range, %d windows with more than one final, %d records that are not candles (and %d later windows the replay did not close)\n",
		tp, len(ref), len(changed), len(missing), len(extra), len(doubled), len(bad), later)
	byTime := func(a, b window) int { return cmp.Or(cmp.Compare(a.open, b.open), strings.Compare(a.symbol, b.symbol)) }
	for _, l := range []struct {
		what string
		ws   []window
	}{{"differs", changed}, {"missing", missing}, {"extra", extra}, {"two finals", doubled}} {
		slices.SortFunc(l.ws, byTime)
		for i, w := range l.ws {
			if i == 5 {
				fmt.Fprintf(b, "  … %d more %s\n", len(l.ws)-i, l.what)
				break
			}
			fmt.Fprintf(b, "  %s %s %s:\n", l.what, w.symbol, time.UnixMilli(w.open).UTC().Format("15:04:05"))
			for _, r := range ref[w] {
				fmt.Fprintf(b, "    replay %s\n", r)
			}
			for _, v := range live[w] {
				fmt.Fprintf(b, "    live   %s\n", v)
			}
		}
	}
	for i, v := range bad {
		if i == 3 {
			break
		}
		fmt.Fprintf(b, "  not a candle: %s\n", v)
	}
}

func diffDeadLetters(b *strings.Builder, want, got []string) {
	w, g := map[string]int{}, map[string]int{}
	for _, v := range want {
		w[v]++
	}
	for _, v := range got {
		g[v]++
	}
	var extra, missing []string
	for v, n := range g {
		if n > w[v] {
			extra = append(extra, fmt.Sprintf("×%d (want ×%d) %s", n, w[v], v))
		}
	}
	for v, n := range w {
		if g[v] < n {
			missing = append(missing, v)
		}
	}
	if len(extra)+len(missing) == 0 {
		return
	}
	slices.Sort(extra)
	slices.Sort(missing)
	fmt.Fprintf(b, "dlq: %d extra or doubled, %d missing (of %d); by stage and reason: replay %s, live %s; on-time records dead-lettered late: replay %d, live %d\n",
		len(extra), len(missing), len(want), reasons(want), reasons(got), len(onTimeLate(want)), len(onTimeLate(got)))
	for i, v := range extra {
		if i == 5 {
			break
		}
		fmt.Fprintf(b, "  extra %s\n", v)
	}
	for i, v := range missing {
		if i == 5 {
			break
		}
		fmt.Fprintf(b, "  missing %s\n", v)
	}
}

// reasons counts dead letters ("stage reason pP@O record") by stage and reason.
func reasons(dl []string) string {
	n := map[string]int{}
	for _, v := range dl {
		f := strings.Fields(v)
		if len(f) >= 2 {
			n[f[0]+" "+f[1]]++
		}
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// onTimeLate returns the dead letters with reason late whose record is not
// one the test injected with a bad clock: every generated trade is on time
// (its disorder is below the lateness), so none of them may be late.
func onTimeLate(dl []string) []string {
	var out []string
	for _, v := range dl {
		if f := strings.Fields(v); len(f) >= 2 && f[1] == "late" && !strings.Contains(v, injectedID) {
			out = append(out, v)
		}
	}
	return out
}

// candleTopicsOf returns the candle topics of a cluster's outputs: every
// topic but the dead letters, sorted.
func candleTopicsOf(out map[string][]string) []string {
	var tps []string
	for tp := range out {
		if tp != "dlq" {
			tps = append(tps, tp)
		}
	}
	slices.Sort(tps)
	return tps
}

// latestRevisions reduces the records of one candle topic, in the order
// they were read, to the newest revision of each window with its rev
// cleared, so that a live group that revised closed windows compares with
// a replay that never needed to (diffLive). A window's records come from
// one partition in offset order, and a consumer must see its revisions go
// up one by one: rev 0 first, then 1, 2, … with none skipped, doubled or
// going back; problem lists the windows where they do not ("" when all
// do). revised counts the windows whose newest candle has rev > 0. Records
// that are not candles are kept as they are (diffLive reports them).
func latestRevisions(vals []string) (latest []string, revised int, problem string) {
	next := map[window]uint32{} // the rev due next in each window
	newest := map[window]candle.Candle{}
	var order []window
	var bad []string
	for _, v := range vals {
		c, err := candle.ParseJSON([]byte(v))
		if err != nil {
			latest = append(latest, v)
			continue
		}
		w := window{c.Symbol, c.OpenTime}
		due, seen := next[w]
		if !seen {
			order = append(order, w)
		}
		if c.Rev != due {
			bad = append(bad, fmt.Sprintf("  %s %s: rev %d where rev %d was due: %s", w.symbol, time.UnixMilli(w.open).UTC().Format("15:04:05"), c.Rev, due, v))
		}
		next[w] = max(due, c.Rev+1)
		if c.Rev >= newest[w].Rev {
			newest[w] = c
		}
	}
	for _, w := range order {
		c := newest[w]
		if c.Rev > 0 {
			revised++
		}
		c.Rev = 0
		latest = append(latest, string(c.AppendJSON(nil)))
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("  … %d more", len(bad)-5))
	}
	return latest, revised, strings.Join(bad, "\n")
}

// twoFinals lists the windows of out that have more than one candle.
func twoFinals(out map[string][]string) string {
	var lines []string
	for _, tp := range candleTopicsOf(out) {
		n := map[window]int{}
		for _, v := range out[tp] {
			if c, err := candle.ParseJSON([]byte(v)); err == nil {
				n[window{c.Symbol, c.OpenTime}]++
			}
		}
		for w, k := range n {
			if k > 1 {
				lines = append(lines, fmt.Sprintf("  %s %s %s: %d finals", tp, time.UnixMilli(w.open).UTC().Format("15:04:05"), w.symbol, k))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The comparison itself: later windows of the live group pass; a changed,
// missing or extra candle in the replay's range, a second final anywhere,
// and a dead letter the replay does not have each fail it, and on-time
// late dead letters are found.
func TestDiffLive(t *testing.T) {
	cnd := func(sym string, open int64, trades int) string {
		return fmt.Sprintf(`{"symbol":%q,"timeframe":"5s","open_time":%d,"close_time":%d,"open":"1","high":"1","low":"1","close":"1","volume":"%d","quote_volume":"%d","trades":%d,"gap":%v}`,
			sym, open, open+5000, trades, trades, trades, trades == 0)
	}
	out := func(c5s []string, dlq ...string) map[string][]string {
		m := map[string][]string{"dlq": dlq}
		for _, tp := range shortChain.candleTopics {
			m[tp] = nil
		}
		m["c.5s"] = slices.Sorted(slices.Values(c5s))
		return m
	}
	late := `c5s late p1@7 {"symbol":"BTC","ts":1,"trade_id":9}`
	want := out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", 0, 1)}, late)
	for _, tc := range []struct {
		name, diff string // diff: a substring of the difference ("" = equal)
		got        map[string][]string
	}{
		{"equal", "", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", 0, 1)}, late)},
		{"later windows", "", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("BTC", 10000, 0), cnd("ETH", 0, 1), cnd("ETH", 5000, 3), cnd("SOL", 0, 1)}, late)},
		{"changed", "1 differ", out([]string{cnd("BTC", 0, 1), cnd("BTC", 5000, 0), cnd("ETH", 0, 1)}, late)},
		{"missing", "1 are missing", out([]string{cnd("BTC", 0, 2), cnd("ETH", 0, 1)}, late)},
		{"extra in range", "1 extra in the replay's range", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", -5000, 0), cnd("ETH", 0, 1)}, late)},
		{"two finals", "1 windows with more than one final", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", 0, 1), cnd("ETH", 0, 2)}, late)},
		{"two finals later", "1 windows with more than one final", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", 0, 1), cnd("ETH", 5000, 1), cnd("ETH", 5000, 0)}, late)},
		{"dead letter", "dlq: 1 extra", out([]string{cnd("BTC", 0, 2), cnd("BTC", 5000, 0), cnd("ETH", 0, 1)}, late, `d15s late p2@3 {"trade_id":4}`)},
	} {
		d := diffLive(want, tc.got)
		if tc.diff == "" && d != "" || tc.diff != "" && !strings.Contains(d, tc.diff) {
			t.Errorf("%s: diff %q, want one containing %q", tc.name, d, tc.diff)
		}
	}
	if n := len(onTimeLate([]string{late, `c5s late p1@8 {"trade_id":"` + injectedID + `ts0"}`, `c5s duplicate p1@9 {}`})); n != 1 {
		t.Errorf("onTimeLate found %d on-time late dead letters, want 1", n)
	}
	if two := twoFinals(out([]string{cnd("BTC", 0, 2), cnd("BTC", 0, 1)})); !strings.Contains(two, "BTC: 2 finals") {
		t.Errorf("twoFinals missed a doubled window: %q", two)
	}
}

// The reduction to the newest revision: a revised window compares by its
// newest candle (rev cleared), and revisions that skip, repeat or go back
// are found.
func TestLatestRevisions(t *testing.T) {
	cnd := func(sym string, open int64, trades int, rev uint32) string {
		c := candle.Candle{Symbol: sym, Timeframe: "5s", OpenTime: open, CloseTime: open + 5000,
			Open: decimal.FromInt(1), High: decimal.FromInt(1), Low: decimal.FromInt(1), Close: decimal.FromInt(1),
			Volume: decimal.SumOf(decimal.FromInt(int64(trades))), QuoteVolume: decimal.SumOf(decimal.FromInt(int64(trades))),
			Trades: int64(trades), Gap: trades == 0, Rev: rev}
		return string(c.AppendJSON(nil))
	}
	// A gap closed by the idle advance, revised twice by the backlog; an
	// unrevised window; a record that is not a candle.
	latest, revised, problem := latestRevisions([]string{cnd("BTC", 0, 0, 0), cnd("ETH", 0, 3, 0), cnd("BTC", 0, 2, 1), "junk", cnd("BTC", 0, 5, 2)})
	if problem != "" || revised != 1 {
		t.Fatalf("in order: revised %d, problem %q", revised, problem)
	}
	if want := []string{cnd("BTC", 0, 5, 0), cnd("ETH", 0, 3, 0), "junk"}; !slices.Equal(slices.Sorted(slices.Values(latest)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("latest %q, want %q", latest, want)
	}
	// The replay's windows (rev 0 only) compare with the newest revisions
	// (latest[0] is the record that is not a candle).
	want := map[string][]string{"c.5s": {cnd("BTC", 0, 5, 0), cnd("ETH", 0, 3, 0)}, "dlq": nil}
	if d := diffLive(want, map[string][]string{"c.5s": slices.Sorted(slices.Values(latest[1:])), "dlq": nil}); d != "" {
		t.Fatalf("the newest revisions differ from the replay: %s", d)
	}
	for _, tc := range []struct {
		name string
		vals []string
		want string
	}{
		{"skipped", []string{cnd("BTC", 0, 0, 0), cnd("BTC", 0, 2, 2)}, "rev 2 where rev 1 was due"},
		{"doubled", []string{cnd("BTC", 0, 0, 0), cnd("BTC", 0, 2, 1), cnd("BTC", 0, 3, 1)}, "rev 1 where rev 2 was due"},
		{"two finals", []string{cnd("BTC", 0, 1, 0), cnd("BTC", 0, 2, 0)}, "rev 0 where rev 1 was due"},
		{"backwards", []string{cnd("BTC", 0, 0, 0), cnd("BTC", 0, 2, 1), cnd("BTC", 0, 3, 2), cnd("BTC", 0, 2, 1)}, "rev 1 where rev 3 was due"},
		{"no first final", []string{cnd("ETH", 5000, 2, 1)}, "rev 1 where rev 0 was due"},
	} {
		if _, _, p := latestRevisions(tc.vals); !strings.Contains(p, tc.want) {
			t.Errorf("%s: problem %q, want one containing %q", tc.name, p, tc.want)
		}
	}
}
