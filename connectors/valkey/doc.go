// Package valkey is kandle's live-chart publish stage: it keeps the open
// candle of every (timeframe, symbol) in a Valkey hash and publishes every
// change on a channel, so charts update in real time without polling.
//
// The usual serverless design does this with one Lua EVALSHA per trade
// (LuaBaseline, kept for comparison). Here the candle
// processor already holds the candle, so Valkey only needs the latest state:
// Sink.Active keeps the newest candle per window (timeframe, symbol,
// open_time) in memory and one owned goroutine sends all changed windows
// every coalesce interval as pipelines of up to 2,048 candles (HSET +
// PEXPIRE + SADD + PUBLISH), up to four pipelines in flight, each holding
// whole keys. A burst of thousands of trades on one symbol costs one round
// trip, not thousands.
//
// Keys and channels (all prefixed by Config.KeyPrefix):
//
//	candle:active:{tf}:{symbol}  hash  o h l c v q t open_time close_time rev
//	candle:rev:{tf}:{symbol}:{open_time}  string  the newest rev above 0 stored
//	                             for that window (kept 24 h after it was set, or
//	                             the hash's expiry when longer)
//	active:symbols               set   every symbol that had an active candle
//	pub:candle:{tf}:{symbol}     channel  candle JSON (with "rev" when above 0)
//	                             plus "final":true|false
//	device:status:{device}       hash  a device's latest silence event: status level action
//	                                   last_seen due_at fired_at recovered_at event (the JSON)
//	pub:device:{device}          channel  every silence event of the device (WriteEvents)
//
// Final (closed) candles arrive through the engine's CandleSink contract
// (Write, Flush, Close): they are published with "final":true and written to
// the hash, retried with jittered backoff until they succeed or the context
// ends, because a final candle must not be lost.
//
// Ordering. A hash must never go back to an older window. Active updates
// have one writer per key (the processor that owns the symbol's
// partition), so the sink's own "newest open_time stored per key" is
// enough: an update for an older window (a late trade into a still-open
// window) is published but does not overwrite the hash. Finals come from a
// different stage (and are redelivered after a crash), so they are stored
// by a compare-and-set in Valkey: one Lua script call (EVALSHA; loaded by
// New, sent again by EVAL if the server lost it) per chunk of up to 128
// finals reads each hash's open_time and writes the hash only if it holds
// no newer window, publishes every candle and adds the symbols, atomically
// and in one round trip. A flush cuts its finals into chunks so that all
// finals of a key are in one chunk, in the order written, and keeps up to
// four chunks in flight: chunks that run at the same time share no key, so
// a key's finals are published in order whichever chunk Valkey runs first.
//
// Revisions. A closed window may be emitted again with a higher rev (a late
// trade, a cancel or a correction inside the processor's revision horizon).
// Per window, what Valkey stores and publishes only goes up in rev: the
// finals script knows a window's newest rev from the hash (when it still
// holds that window) or from the window's revision guard key (set by every
// stored rev above 0), and a final whose rev is below it is neither stored
// nor published (counted in stale_revisions_total; not an error). An equal
// rev is stored and published again, so a redelivery stays harmless. A
// revision of an older window than the hash holds is published (with its
// rev and "final":true) but leaves the hash on the newer window. A hash
// written before revisions existed has no rev field and reads as rev 0.
//
// Live before final. Before each attempt to store finals, the sink orders
// its own live path of their keys: a pending live update of a final's
// window or an older one is superseded by the final and dropped (counted in
// active_coalesced_total); if a newer window's update of those keys is
// pending, or a live pipeline holding those keys is in flight, the finals
// wait for that pipeline and for a live flush of what is pending. So every
// live update handed to Active before Write of a final of the same key is
// published before that final or not at all: a subscriber sees no live
// message of a closed window after its final unless Active was called with
// it after the final was stored. When
// nothing of those keys is pending or in flight this costs no round trip.
// The limit: updates from another sink (another process) are not ordered
// against this sink's finals; the hash still never goes back to an older
// window, whoever writes it.
//
// Outages: Active never blocks and never fails. While Valkey is down the
// pending windows are at most one candle per key: the newest window's (an
// outage of any length costs memory per symbol, not per minute of outage).
// Failed flushes are retried with backoff, and updates that are replaced
// before Valkey is back are counted as dropped.
package valkey
