package processors

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestCandleTradeIDs: the first and last trade ids of the candles the
// aggregator hands out (live candles from Active, final candles from
// Process) are those of the window's earliest and latest trade (arrival
// order on ties), also for windows restored from state, and a string once
// handed out never changes afterwards (the ids are carved out of shared
// blocks, see idStrings).
func TestCandleTradeIDs(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 0x1d5))
		recs, _ := exchangeTrades(rng, 3000, 2+rng.IntN(30), time.Minute)
		mod := func(c *CandleConfig) { c.Timeframe, c.Lateness = tfOf(t, "1m", nil), 2*time.Second }
		type ids struct {
			fTS, lTS int64
			f, l     string
		}
		model := map[string]*ids{} // key + window open → its ids
		winOf := func(key string, open int64) string { return fmt.Sprintf("%s@%d", key, open) }
		type handed struct {
			c    candle.Candle
			f, l string // clones of c's ids when it was handed out
		}
		var kept []handed
		check := func(c *candle.Candle, what string, i int) {
			m := model[winOf(c.Symbol, c.OpenTime)]
			if m == nil || c.FirstTradeID != m.f || c.LastTradeID != m.l {
				t.Fatalf("seed %d, record %d: %s candle %s %d has ids %q..%q; want %+v", seed, i, what, c.Symbol, c.OpenTime, c.FirstTradeID, c.LastTradeID, m)
			}
			kept = append(kept, handed{*c, strings.Clone(c.FirstTradeID), strings.Clone(c.LastTradeID)})
		}
		a := newAgg(t, candle.Timeframe{}, mod)
		st := store{}
		var out Output
		for i, rec := range recs {
			out.Reset()
			a.Process(Record{Offset: int64(i), Value: rec}, &out)
			if len(out.Rejected) == 0 {
				var tr struct {
					S  string          `json:"s"`
					T  int64           `json:"t"`
					ID json.RawMessage `json:"i"`
				}
				if err := json.Unmarshal(rec, &tr); err != nil {
					t.Fatal(err)
				}
				var id string
				if len(tr.ID) > 0 && json.Unmarshal(tr.ID, &id) != nil {
					id = string(tr.ID) // a number: its text
				}
				open := tr.T - tr.T%60_000
				m := model[winOf(tr.S, open)]
				if m == nil {
					m = &ids{fTS: tr.T, lTS: tr.T, f: id, l: id}
					model[winOf(tr.S, open)] = m
				}
				if tr.T < m.fTS {
					m.fTS, m.f = tr.T, id
				}
				if tr.T >= m.lTS {
					m.lTS, m.l = tr.T, id
				}
			}
			for j := range out.Candles {
				if c := &out.Candles[j]; !c.Gap {
					check(c, "final", i)
				}
			}
			if rng.IntN(4) == 0 {
				a.Active(func(c *candle.Candle) { check(c, "live", i) })
			}
			if rng.IntN(50) == 0 {
				st.apply(a)
			}
			if rng.IntN(400) == 0 { // a restart from a checkpoint taken now
				st.apply(a)
				a = newAgg(t, candle.Timeframe{}, mod)
				st.restoreInto(t, a, rng)
			}
		}
		if len(kept) < 1000 {
			t.Fatalf("seed %d: only %d candles handed out", seed, len(kept))
		}
		for _, h := range kept {
			if h.c.FirstTradeID != h.f || h.c.LastTradeID != h.l {
				t.Fatalf("seed %d: candle %s %d handed out with ids %q..%q now has %q..%q", seed, h.c.Symbol, h.c.OpenTime, h.f, h.l, h.c.FirstTradeID, h.c.LastTradeID)
			}
		}
	}
}
