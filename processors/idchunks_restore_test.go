package processors

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

var idChunkSeeds = flag.Int("idchunks.seeds", 24, "random streams TestIDChunksSurviveKills runs")

// exchangeTrades is a trade stream like an exchange's: every key has its
// own trade id sequence, mostly ascending, with some ids out of order,
// repeated (as numbers or strings), non-numeric or missing, some trades
// late, event time moving on (with quiet stretches) so windows close. The
// wall clock of each record runs a little ahead of its event time.
func exchangeTrades(rng *rand.Rand, n, keys int, win time.Duration) (recs [][]byte, walls []time.Time) {
	next := make([]int64, keys)
	for k := range next {
		next[k] = 1 + rng.Int64N(1e9)
	}
	out := make([][]byte, 0, n)
	cur := baseDay
	step := int64(win) / int64(1+rng.IntN(200)) // trades per window over all keys
	for range n {
		cur = cur.Add(time.Duration(rng.Int64N(2*step + 1)))
		if rng.IntN(200) == 0 {
			cur = cur.Add(time.Duration(rng.Int64N(int64(20 * win)))) // a quiet stretch
		}
		ts := cur.Add(-time.Duration(rng.Int64N(int64(time.Second))))
		if rng.IntN(40) == 0 {
			ts = cur.Add(-time.Duration(rng.Int64N(int64(3 * win)))) // late, perhaps too late
		}
		k := rng.IntN(keys)
		if rng.IntN(3) == 0 {
			k = rng.IntN(min(keys, 3)) // a few busy keys
		}
		id := fmt.Sprintf(`,"i":%d`, next[k])
		switch r := rng.IntN(100); {
		case r < 80:
			next[k]++
		case r < 86: // out of order: an id skipped earlier, or one ahead
			id = fmt.Sprintf(`,"i":%d`, next[k]-1-rng.Int64N(30))
			if rng.IntN(2) == 0 {
				id = fmt.Sprintf(`,"i":%d`, next[k]+1+rng.Int64N(5))
			}
		case r < 92: // a duplicate, as a number or a string
			id = fmt.Sprintf(`,"i":%d`, next[k]-1-rng.Int64N(10))
			if rng.IntN(2) == 0 {
				id = fmt.Sprintf(`,"i":"%d"`, next[k]-1-rng.Int64N(10))
			}
		case r < 96:
			id = fmt.Sprintf(`,"i":"x%d"`, rng.IntN(50))
		case r < 98:
			id = ""
		default: // a non-canonical numeric id
			id = fmt.Sprintf(`,"i":"0%d"`, next[k])
		}
		out = append(out, fmt.Appendf(nil, `{"s":"K%d","t":%d,"p":"%d.%02d","q":"0.%03d"%s}`,
			k, ts.UnixMilli(), 1+rng.IntN(200), rng.IntN(100), 1+rng.IntN(999), id))
		wall := cur.Add(time.Duration(rng.Int64N(int64(800 * time.Millisecond))))
		if len(walls) > 0 && wall.Before(walls[len(walls)-1]) {
			wall = walls[len(walls)-1]
		}
		walls = append(walls, wall)
	}
	// Last, a trade some windows later closes every window still open.
	cur = cur.Add(10 * win)
	out = append(out, fmt.Appendf(nil, `{"s":"K0","t":%d,"p":"1","q":"1","i":"end"}`, cur.UnixMilli()))
	return out, append(walls, cur)
}

// idChunkCase is one random configuration of the id chunk tests.
type idChunkCase struct {
	win                            time.Duration
	gap, revise, live, idle, fused bool
}

// randomIDChunkCase draws a window of 15s or 1m, gap fill or not, a
// revision horizon (1 in 4), the shipped idle_timeout and max_future or
// none, keys freed after a short max_idle (1 in 3) and quiet marks for
// fused rollups (1 in 3).
func randomIDChunkCase(rng *rand.Rand) idChunkCase {
	return idChunkCase{win: [2]time.Duration{15 * time.Second, time.Minute}[rng.IntN(2)],
		gap: rng.IntN(2) == 0, revise: rng.IntN(4) == 0, live: rng.IntN(2) == 0,
		idle: rng.IntN(3) == 0, fused: rng.IntN(3) == 0}
}

func (cc idChunkCase) String() string {
	return fmt.Sprintf("%s, gap fill %v, revise %v, live %v, max_idle %v, rollups %v", cc.win, cc.gap, cc.revise, cc.live, cc.idle, cc.fused)
}

// mod configures an aggregator as cc says.
func (cc idChunkCase) mod(t *testing.T) func(*CandleConfig) {
	return func(c *CandleConfig) {
		c.Timeframe = tfOf(t, map[time.Duration]string{15 * time.Second: "15s", time.Minute: "1m"}[cc.win], nil)
		c.Lateness, c.GapFill = 2*time.Second, cc.gap
		if cc.revise {
			c.ReviseWithin = time.Hour
		}
		if cc.live { // the shipped idle_timeout and max_future
			c.Live, c.IdleTimeout, c.MaxFuture = true, 5*time.Second, time.Second
		}
		if cc.idle {
			c.MaxIdle = 8 * cc.win
		}
		if cc.fused {
			c.Rollups = []candle.Timeframe{tfOf(t, "5m", nil), tfOf(t, "15m", nil)}
		}
	}
}

// TestIDChunksSurviveKills: an aggregator with dedupe whose instance is
// killed at random points (its changes since the last checkpoint lost,
// sometimes after a commit that failed) restores from the checkpointed
// entries without an error, and with the records after the checkpoint
// replayed its outputs (up to a last trade that closes every window) are
// those of an uninterrupted run. Checkpoints come
// after every trade in some stretches and after thousands in others.
func TestIDChunksSurviveKills(t *testing.T) {
	chunks, later := 0, 0 // id chunk entries restored
	for seed := range uint64(*idChunkSeeds) {
		rng := rand.New(rand.NewPCG(seed, 0x1dc))
		cc := randomIDChunkCase(rng)
		win, gap, revise, idle, fused, mod := cc.win, cc.gap, cc.revise, cc.idle, cc.fused, cc.mod(t)
		clock := &testClock{}
		build := func() *Aggregator {
			a := newAgg(t, candle.Timeframe{}, mod)
			a.clock = clock
			return a
		}
		recs, walls := exchangeTrades(rng, 4000, 2+rng.IntN(40), win)
		desc := fmt.Sprintf("seed %d (%s)", seed, cc)

		outOf := func(a *Aggregator, i int, out *Output) string {
			var b strings.Builder
			clock.t = walls[i]
			if i%3 == 0 {
				out.Reset()
				a.Tick(out)
				fmtOutput(&b, out)
			}
			out.Reset()
			a.Process(Record{Offset: int64(i), Value: recs[i]}, out)
			fmtOutput(&b, out)
			return b.String()
		}
		var out Output
		want := make([]string, len(recs))
		ref := build()
		for i := range recs {
			want[i] = outOf(ref, i, &out)
		}

		all := strings.Join(want, "")
		for _, must := range []string{"reject duplicate", "reject late", " gap", " ids="} {
			if !strings.Contains(all, must) && (must != " gap" || gap) && (must != "reject late" || !revise) {
				t.Fatalf("%s: the stream has no %q", desc, must)
			}
		}
		if fused && (idle || !gap) && !strings.Contains(all, "quiet ") {
			t.Fatalf("%s: no key went quiet", desc)
		}
		st := store{}
		ck := 0 // records before ck are in st
		// restore is a new owner's start from the last checkpoint. A
		// restored partition's idle clock starts at the restore: the new
		// owner restores at the wall time the last checkpointed record was
		// read, so that its idle advances are the uninterrupted run's.
		restore := func() *Aggregator {
			if ck > 0 {
				clock.t = walls[ck-1]
			}
			for k := range st {
				if k[0] == entryIDs {
					r := reader{b: []byte(k[1:])}
					r.bytes(r.uvarint())
					r.varint()
					if r.uvarint() > 0 {
						later++ // a window's second or later id chunk
					}
					chunks++
				}
			}
			p := build()
			st.restoreInto(t, p, rng)
			return p
		}
		every := 1 // checkpoint after at most this many records
		restores, lost := 0, 0
		p := build()
		got := make([]string, len(recs))
		for i := 0; i < len(recs); i++ {
			got[i] = outOf(p, i, &out)
			if rng.IntN(300) == 0 {
				every = [4]int{1, 1 + rng.IntN(20), 1 + rng.IntN(500), 1 + rng.IntN(4000)}[rng.IntN(4)]
			}
			if i+1-ck >= every || rng.IntN(every) == 0 {
				if restores < 40 && rng.IntN(15) == 0 {
					// The commit failed: the instance goes on a little, its
					// changes lost, and dies.
					p.Changes(func(k, v []byte) {})
					lost++
					for j := i + 1; j < min(i+1+rng.IntN(50), len(recs)); j++ {
						outOf(p, j, &out)
						if rng.IntN(5) == 0 {
							p.Changes(func(k, v []byte) {})
						}
					}
					p = restore() // killed
					restores++
					i = ck - 1
					continue
				}
				st.apply(p)
				ck = i + 1
			}
			if restores < 40 && rng.IntN(300) == 0 { // killed: a new owner restores the last checkpoint and replays
				p = restore()
				restores++
				i = ck - 1
			}
		}
		if restores == 0 {
			t.Fatalf("%s: no restore", desc)
		}
		for i := range recs {
			if got[i] != want[i] {
				t.Fatalf("%s: output of record %d differs after %d restores (%d lost commits)\n got: %q\nwant: %q",
					desc, i, restores, lost, got[i], want[i])
			}
		}
	}
	if chunks == 0 || later == 0 {
		t.Fatalf("%d id chunks restored, %d of them a window's second or later: the streams do not exercise them", chunks, later)
	}
	t.Logf("%d id chunks restored, %d of them a window's second or later", chunks, later)
}
