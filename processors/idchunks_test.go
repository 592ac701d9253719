package processors

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kandle/kandle/candle"
)

// TestIDChunksKeepArrivalOrder checks the bytes of the dedupe id chunks:
// over random checkpoints, a key's chunks, read in sequence, hold every
// accepted trade id of its window in the order it came, each as a uvarint
// length and its bytes, whichever way the id was remembered (in-order
// numeric ids are written out at the checkpoint, the others as they come).
func TestIDChunksKeepArrivalOrder(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			a := newAgg(t, candle.Timeframe{N: 1, Unit: candle.Minute}, func(c *CandleConfig) { c.Lateness = 2 * time.Second })
			want := map[string][]string{} // accepted ids by key, in arrival order
			got := map[string][]byte{}    // the key's chunk values, in sequence
			seq := map[string]uint64{}
			checkpoint := func() {
				a.Changes(func(k, v []byte) {
					if k[0] != entryIDs || v == nil {
						return
					}
					r := reader{b: k[1:]}
					name := string(r.bytes(r.uvarint()))
					r.varint() // the window's open time: one window per key here
					if s := r.uvarint(); r.err != nil || s != seq[name] {
						t.Fatalf("key %s: chunk %d, want %d (%v)", name, s, seq[name], r.err)
					}
					seq[name]++
					got[name] = append(got[name], v...)
				})
			}
			top := map[string]uint64{}
			ts := baseDay.UnixMilli()
			for i := range 2000 {
				key := fmt.Sprintf("K%d", rng.IntN(3))
				var id string
				switch r := rng.IntN(20); {
				case r < 12: // upwards, as exchanges number trades
					top[key] += 1 + uint64(rng.IntN(3))
					id = strconv.FormatUint(top[key], 10)
				case r < 15 && top[key] > 0: // an earlier number: new or a duplicate
					id = strconv.FormatUint(rng.Uint64N(top[key])+1, 10)
				case r < 17:
					id = fmt.Sprintf("x%d", rng.IntN(50))
				case r < 18:
					id = fmt.Sprintf("0%d", rng.IntN(50)) // not canonical: a string id
				case r < 19:
					id = strings.Repeat("L", 32) + strconv.Itoa(rng.IntN(20)) // beyond the inline ids
				default:
					id = strconv.FormatUint(1e18+uint64(rng.IntN(100)), 10) // 19 digits
				}
				rec := fmt.Appendf(nil, `{"s":%q,"t":%d,"p":"1.5","q":"2","i":%q}`, key, ts+int64(i), id)
				var out Output
				a.Process(Record{Offset: int64(i), Value: rec}, &out)
				if len(out.Rejected) == 0 {
					want[key] = append(want[key], id)
				} else if out.Rejected[0].Reason != ReasonDuplicate {
					t.Fatalf("trade %d: %s", i, out.Rejected[0].Detail)
				}
				if rng.IntN(40) == 0 {
					checkpoint()
				}
			}
			checkpoint()
			for key, ids := range want {
				r, have := reader{b: got[key]}, []string(nil)
				for len(r.b) > 0 && r.err == nil {
					have = append(have, string(r.bytes(r.uvarint())))
				}
				if r.err != nil || !slices.Equal(have, ids) {
					t.Fatalf("key %s: chunks hold %d ids %q…, want %d %q… (%v)", key, len(have), head(have), len(ids), head(ids), r.err)
				}
			}
		})
	}
}

func head(s []string) []string { return s[:min(len(s), 8)] }

