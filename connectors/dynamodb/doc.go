// Package dynamodb writes kandle's candles (and raw trades or device
// readings) to Amazon DynamoDB, provisions the tables they live in, and runs
// the reads the charts need.
//
// Why it looks the way it does:
//
//   - Every write is an idempotent upsert. An item's key is rendered from YAML
//     templates (pk/sk with {symbol}, {timeframe}, {open_time}, {ts}, …), so a
//     candle or trade delivered again after a crash or replay overwrites
//     itself with identical attributes. TTLs are computed from event time,
//     not the wall clock, for the same reason.
//   - A candle's revisions only go up in the table. A candle is stored with
//     its rev (the attribute rev, left out at 0, so an item at rev 0 looks
//     as it did before revisions existed and an old item reads as rev 0),
//     and written by a PutItem whose condition is that the stored item has
//     no rev or one not above the candle's. An older revision — redelivered
//     after a crash, or written late by a second instance — is refused by
//     DynamoDB itself: it is counted in kandle_dynamodb_stale_writes_total
//     and dropped, neither an error nor retried. An equal rev rewrites the
//     item (redelivery stays idempotent). BatchWriteItem cannot carry a
//     condition, and a rev-0 candle needs one too: a redelivered rev 0 after
//     its rev 1 must not win. Within one buffer the highest rev of a key is
//     kept. The price is one request per candle instead of one per 25:
//     against dynalite on a loaded 2-core machine (BenchmarkSinkVsIdeal, one
//     run) the sink wrote 1,470 candles/s, an ideal client sending the same
//     conditional puts 1,580 and one sending BatchWriteItem 3,240 (the
//     sink wrote 5,200 with batches before, unloaded). On DynamoDB a
//     conditional put costs the same write units as a batched one; the
//     sink keeps max_in_flight × 25 puts in flight (and as many idle
//     connections) to hide the latency. A sink whose processors keep no
//     revision horizon (WithRevisions(false); kandle sets it from the
//     topology) has nothing to order and writes candles in batches as before.
//   - Trades, readings and events go out as BatchWriteItem calls of at most
//     25 distinct keys (DynamoDB rejects a batch that names a key twice; the
//     last write in a buffer wins), a bounded number in flight. UnprocessedItems, throttling
//     and network errors are retried with jittered exponential backoff until
//     the context ends, so an outage pauses the stage instead of losing data.
//     Items DynamoDB can never accept (over 400 KB, keys too long, rejected by
//     validation) come back as a *RejectedError listing the candles or trades,
//     so the engine can dead-letter them.
//   - Prices and volumes are stored as DynamoDB strings holding the exact
//     decimal text. DynamoDB's N type would hold 18 decimal places too (it
//     has 38 significant digits), but strings keep the value byte-for-byte the
//     same as on the candle topics and spare readers a float round trip.
//     Times and counts are N.
//   - Apply provisions tables, GSIs, LSIs and TTL idempotently and returns a
//     Plan that doubles as the --dry-run output. Emulators without
//     UpdateTimeToLive (dynalite) get a warning, not a failure.
//   - Reads live on a Reader (NewReader, or Sink.Reader for a sink's own
//     table), beside the Sink that writes: both render keys from the same
//     templates and share one retry loop, and a process that only reads
//     (kandle serve, kandle query) holds no write buffer.
//   - Queries for candle history (Latest, Range, LatestMany) use Query rather
//     than BatchGetItem, because "latest" has no exact key to ask for;
//     ReadSharded merges write-sharded partitions back into one ordered stream.
//     Where the key is exact — one item per device kept current by a constant
//     sort key such as "latest" — GetItems reads many at once with
//     BatchGetItem (100 keys a request, UnprocessedKeys retried), strongly
//     consistent on request; QueryIndex reads a declared GSI (eventually
//     consistent, as DynamoDB allows).
//   - Events of silence processors (WriteEvents) become one item per key the
//     templates render from their fields (DEVICE#{owner} / {device}#{event}):
//     a later event of the same device and level replaces the earlier one.
package dynamodb
