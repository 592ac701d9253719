// Package topotest runs topology unit tests written in YAML: input records
// per source partition, the candles each processor must close and the dead
// letters the records must produce. A test runs in process through
// engine.Pipeline — no broker, no wall clock — so it is deterministic and
// fast, and an analyst can check a topology edit before deploying it with
// `kandle test`.
//
// A test file (conventionally NAME_test.yaml, next to the topology):
//
//	topology: crypto.yaml          # relative to this file
//	now: 2026-01-01T00:00:00Z      # optional clock for the future guard (default: far future, guard never fires)
//	tests:
//	  - name: ten tenths make one
//	    now: ...                   # optional, overrides the file's now
//	    input:
//	      trades:                  # source name
//	        - partition: 0         # optional, default 0
//	          offset: 0            # optional: first offset of this block (default: continue the partition)
//	          key: BTC             # optional record key of every record of the block, null for none
//	                               # (default: each record's key field, as a producer keying by symbol sends it)
//	          records:
//	            - {symbol: BTC, ts: "2026-01-01T00:00:01Z", price: "100", qty: "0.1", trade_id: 1}
//	            - '{"symbol":"BTC", broken'    # a string is sent verbatim
//	    expect:
//	      1m:                      # processor name: its closed candles, in emission order
//	        - {symbol: BTC, open_time: "2026-01-01T00:00:00Z", open: "100", volume: "1", trades: 10}
//	      dead_letters:            # rejections of any processor, in order
//	        - {reason: malformed_json, partition: 0, offset: 3}
//	    expect_exactly: true       # default
//
// Silence processors (kind silence) measure time by when records were
// ingested. A block's `at: <time>` sets the ingestion time of its records
// (default: each record's event time), and a block written as
// `- advance: <time>` (no records) moves every silence processor's clock to
// that time, firing the levels that come due — the test's stand-in for the
// wall clock. Their expectations list events, comparing the fields given
// (device, event, level, action, highest, silent_ms, carried fields as
// text; due_at, fired_at, last_seen, last_ingested and recovered_at as
// instants in any offset or epoch ms):
//
//	input:
//	  readings:
//	    - at: "2026-01-01T08:00:00Z"
//	      records: [{deviceId: d1, timestamp: "2026-01-01T08:00:00Z", value: 1}]
//	    - advance: "2026-01-04T08:00:00Z"
//	expect:
//	  silence:
//	    - {device: d1, event: unreachable, due_at: "2026-01-04T08:00:00Z"}
//
// Records given as YAML mappings are re-encoded as JSON from the YAML text,
// never through float64: a YAML number 100.5 becomes the JSON number 100.5,
// a quoted "7" stays a string. Blocks are fed in the order written; write
// several blocks to interleave partitions.
//
// Expectations compare only the fields they give: symbol, timeframe,
// open_time, close_time (RFC 3339 or epoch ms), open, high, low, close,
// volume, quote_volume (exact decimals: "1" equals "1.0"), trades, gap,
// taker_buy_base_volume, taker_buy_quote_volume (null: the candle has none)
// first_trade_id, last_trade_id (null: none) and rev for candles; stage, reason, partition, offset, key and detail (a substring)
// for dead letters. Only the processors listed under expect are checked, and
// dead letters only when dead_letters is listed (write `dead_letters: []` to
// assert there are none). With expect_exactly (the default) a checked list
// must match the produced one line for line; with expect_exactly: false the
// expectations need only appear in that order among what was produced.
//
// Revisions: with revise_within set on a candles processor, a late trade
// is simply a record whose event time falls in a window the watermark has
// passed, fed after the records that moved the watermark; a cancel or a
// correction is a record with the source's action field (and the trade id
// it takes back; a correction with its new price and qty). The window is
// then emitted again, after the record that next moves the watermark, and
// its expectation gives the revision it must carry (rev 0 is the first
// final, each revision one more):
//
//	input:
//	  trades:
//	    - records:
//	        - {symbol: BTC, ts: "2026-01-01T00:00:30Z", price: "100", qty: "1", trade_id: 1}
//	        - {symbol: BTC, ts: "2026-01-01T00:01:30Z", price: "101", qty: "1", trade_id: 2}  # closes 00:00
//	        - {symbol: BTC, ts: "2026-01-01T00:00:40Z", price: "105", qty: "1", trade_id: 3}  # late, inside the horizon
//	        - {symbol: BTC, ts: "2026-01-01T00:01:40Z", price: "101", qty: "1", trade_id: 4}  # moves the watermark
//	expect:
//	  1m:
//	    - {symbol: BTC, open_time: "2026-01-01T00:00:00Z", high: "100", rev: 0}
//	    - {symbol: BTC, open_time: "2026-01-01T00:00:00Z", high: "105", trades: 2, rev: 1}
//
// An expectation without rev matches any revision, as any other field left
// out; with expect_exactly every revision produced must be listed.
//
// A processor that panics on a record is treated as kandle run treats it:
// its state is rebuilt as of before the record and the record given again;
// a second panic dead-letters the record (reason internal_error, the stack
// in the log) and the test carries on. Any panic fails the test, whatever
// its expectations, and the report says where it happened.
package topotest
