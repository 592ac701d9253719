// Package valkey is kandle's live-chart publish stage: it keeps the open
// candle of every (timeframe, symbol) in a Valkey hash and publishes every
// change on a channel, so charts update in real time without polling.
//
// The seeds did this with one Lua EVALSHA per trade. Here the candle
// processor already holds the candle, so Valkey only needs the latest state:
// Sink.Active keeps the newest candle per window (timeframe, symbol,
// open_time) in memory and one owned goroutine sends all changed windows
// every coalesce interval in a single pipeline (HSET + PEXPIRE + SADD +
// PUBLISH). A burst of thousands of trades
// on one symbol costs one round trip, not thousands.
//
// Keys and channels (all prefixed by Config.KeyPrefix):
//
//	candle:active:{tf}:{symbol}  hash  o h l c v q t open_time close_time
//	active:symbols               set   every symbol that had an active candle
//	pub:candle:{tf}:{symbol}     channel  candle JSON plus "final":true|false
//	device:status:{device}       hash  a device's latest silence event: status level action
//	                                   last_seen due_at fired_at recovered_at event (the JSON)
//	pub:device:{device}          channel  every silence event of the device (WriteEvents)
//
// Final (closed) candles arrive through the engine's CandleSink contract
// (Write, Flush, Close): they are published with "final":true and written to
// the hash, retried with jittered backoff until they succeed or the context
// ends, because a final candle must not be lost.
//
// Ordering without Lua. A hash must never go back to an older window. Active
// updates have one writer per key (the processor that owns the symbol's
// partition), so an in-memory "newest open_time per key" in the flush
// goroutine is enough: an update for an older window (a late trade into a
// still-open window) is published but does not overwrite the hash. Finals
// come from a different stage (and are redelivered after a crash), so they
// use a compare-and-set: WATCH the keys and read their stored open_time in
// one round trip, then MULTI/HSET only the keys whose stored open_time is not
// newer/EXEC in a second. If the active writer touches a watched key in
// between, EXEC aborts and the chunk is retried (smaller). Two round trips
// per batch of finals, and no script to load, version or debug.
//
// Outages: Active never blocks and never fails. While Valkey is down the
// pending map holds at most one candle per key: the newest window's (an
// outage of any length costs memory per symbol, not per minute of outage).
// Failed flushes are retried with backoff, and updates that are replaced
// before Valkey is back are counted as dropped.
package valkey
