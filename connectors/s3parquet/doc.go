// Package s3parquet is kandle's candle lake: a sink that stores closed
// candles as zstd-compressed Parquet files on S3 (or a local folder), laid
// out in Hive-style partitions that query engines such as DuckDB, Athena,
// Spark and Trino read directly:
//
//	<prefix>/timeframe=<tf>/symbol=<sym>/year=YYYY/month=MM/day=DD/candles.parquet
//
// The date is the UTC date of the candle's open_time. The symbol is escaped
// with EscapeSymbol: every byte outside A–Z a–z 0–9 - _ . ~ becomes %XX
// (upper-case hex), so "BTC/USDT" is stored as "BTC%2FUSDT" and
// url.PathUnescape (or UnescapeSymbol) gives the symbol back.
//
// # Exactly-once results from at-least-once delivery
//
// The engine may hand the sink the same candle more than once (after a
// crash, a rebalance or a replay). Each (timeframe, symbol, day) therefore
// has exactly one object with a fixed name, and a flush upserts into it:
// it reads the existing object (if any), merges the buffered candles into it
// keyed by open_time (the newest write wins, unless it is an older
// revision: see Revisions), sorts by open_time and rewrites the whole
// object. Any redelivery or replay converges to the same
// bytes, whatever the flush timing. The price is a rewrite of the day's
// object per flush: a flush costs one PUT per touched partition, plus one
// GET unless this sink wrote the object last (see the write cache below),
// and the object is bounded by one day of one symbol and timeframe
// (86 400 rows for 1s candles, 1 440 for 1m).
//
// On S3 the credentials need s3:GetObject, s3:PutObject and s3:ListBucket
// on the bucket: without ListBucket, S3 answers a missing object with 403
// instead of 404, which the sink must treat as a permanent error.
//
// # Revisions
//
// A closed window may be emitted again with a higher rev (a late trade, a
// cancel or a correction inside the processor's revision horizon). An
// object holds one row per window: the one with the highest rev. A candle
// whose rev is below the one already buffered or stored for its window (an
// older revision redelivered, or arriving late) is not written and is
// counted in kandle_s3parquet_stale_revisions_total; it is not an error. An
// equal rev replaces the row (a redelivery writes the same bytes). This
// holds in each place the sink merges: its buffer, its own last write
// (the write cache) and an object it reads.
//
// # One writer per object
//
// The engine keys sinks by partition of the candle topics and a symbol
// lives in one partition, so one instance owns an object's series at a
// time, and a partition moves only after its old owner flushed. That alone
// does not cover an owner that was cut off from its group while a PUT hung:
// the PUT could land after the new owner wrote the object and roll it back.
// So every write is a compare-and-swap: the PUT carries If-Match with the
// ETag of the object that was read (If-None-Match: * when there was none),
// and a store that answers 412 Precondition Failed (or 409, or 404 for a
// deleted object) has kept the other writer's object. The sink then reads
// it again, merges its candles into it and writes again, at most
// maxConflicts times per object and flush (kandle_s3parquet_write_conflicts_total
// counts the refusals, each logged with the object), so the new owner's
// candles are never lost or rolled back.
//
// Because writes are fenced, the read can be skipped when the sink itself
// wrote the object last: the write cache (Config.WriteCacheBytes, bounded
// by the estimated memory of the candles, least recently written object
// dropped first) keeps, per object, the ETag returned by the sink's own
// last successful PUT and the candles that PUT wrote. The next flush
// merges into those candles and PUTs with If-Match that ETag. If another
// writer replaced the object since, the store refuses the PUT; the sink
// drops the entry, counts the conflict and falls back to reading, merging
// and writing as above, so the other writer's candles are kept exactly as
// without the cache. A store that returns no ETag on PUT is not cached;
// with unconditional_writes (nothing fences a write) the sink always reads.
// kandle_s3parquet_write_cache_hits_total counts the writes without a read.
//
// An object the cache does not hold is first written from the buffered
// candles alone with If-None-Match: * (create only): right exactly when it
// does not exist, which saves the read on each object's first flush (one
// series' new UTC day). If it exists (written before a restart, dropped
// from the cache, or by another writer), the store refuses the write and
// keeps the object, and the sink reads, merges and writes as above.
// kandle_s3parquet_create_refused_total counts these refusals; they are
// not fencing conflicts (nothing was read) and write_conflicts_total does
// not count them. With unconditional_writes the sink reads first, since a
// PUT without the condition would overwrite the object.
//
// New checks at start that the store honours the conditions: it writes the
// probe object ProbeKey under the prefix, then expects a second PUT with
// If-None-Match: * and one with a wrong If-Match to fail with 412. A store
// that accepts them (s3rver) is refused with a message, unless
// Config.UnconditionalWrites says that one instance writes this lake alone.
//
// A file:// lake gives the same guarantee with a compare-and-rename: the
// version is the SHA-256 of the file's bytes, checked under an flock on
// LockName at the lake's root just before the rename. Where flock does not
// exist (Windows, Solaris, AIX) a file lake is single-writer.
//
// # Columns
//
//	symbol, timeframe          STRING (dictionary encoded)
//	open_time, close_time      INT64 TIMESTAMP(MILLIS, isAdjustedToUTC=true)
//	open, high, low, close     FIXED_LEN_BYTE_ARRAY(16) DECIMAL(38,18)
//	volume, quote_volume       STRING (exact decimal text)
//	trades                     INT64
//	gap                        BOOLEAN
//	taker_buy_base_volume,     STRING (exact decimal text, "" when the
//	taker_buy_quote_volume     source has no side)
//	first_trade_id,            STRING ("" when the candle has none)
//	last_trade_id
//	rev                        INT64 (the candle's revision, 0 for the first final)
//
// Prices are package decimal's 128-bit unscaled value (×10^18) as 16 bytes
// of big-endian two's complement. Scale 18 is decimal's own, so reading a
// file back is exact. Precision 38 holds magnitudes below 10^20, which is
// every price kandle accepts; Write still rejects (RejectedError) a candle
// with a price of 10^20 or more instead of writing a file readers misread.
//
// The files are written column by column by the package's own Parquet
// writer (encode.go): data pages v1 of at most 64 KiB of values, each
// compressed with zstd at its fastest level (the literals of pages up to
// 1 KiB without entropy coding, still plain zstd), symbol and timeframe
// dictionary encoded, every other column PLAIN, min/max statistics per
// column chunk. The bytes depend only on the candles and row_group_rows,
// so a replay rewrites an object with the same bytes. Files are read back
// by its counterpart, the package's column reader (colread.go; Decode and
// Reader): footer, then only the column chunks a candle needs, pages
// decoded straight into the candles' fields. A file of a layout kandle
// never wrote (OPTIONAL or nested columns, another encoding or codec) is
// read with parquet-go's reader instead.
//
// Volumes are exact sums that may need up to 36 decimal places (a quote
// volume keeps every digit of price × qty) and more than 38 digits, which no
// Parquet DECIMAL that common readers support can hold, so they are stored
// as plain decimal text ("515399.785058469582700587000000000000000001").
// Read them as text, or CAST them to a DECIMAL or DOUBLE when approximate
// values are enough. Files written before this layout (volumes as
// DECIMAL(38,18)) are still read (see Decode), and so are files written
// before taker volumes and trade ids, or before rev (their candles read as
// rev 0). A query over a lake mixing files with and without rev needs
// union_by_name = true in DuckDB (a missing rev is NULL: read it as 0).
//
// # Flushing
//
// Write buffers. The buffer is flushed when it holds flush_rows candles or
// about flush_bytes, when its oldest candle has waited flush_age (checked on
// Write with the sink's Clock), and a (timeframe, symbol) day is flushed as
// soon as a candle of a later day of that series arrives. The engine calls
// Flush before it commits consumer offsets; when Flush returns nil every
// candle written so far is durable. Transient failures (network, 5xx,
// throttling) are retried with jittered exponential backoff until the
// context ends, so an outage pauses the stage instead of losing candles.
// Candles that can never be stored are returned as a *RejectedError.
//
// # Querying
//
// The lake reads as one Hive-partitioned dataset, for example in DuckDB:
//
//	SELECT * FROM read_parquet('lake/**/*.parquet', hive_partitioning = true)
//	WHERE timeframe = '1m' AND symbol = 'BTC/USDT' AND year = 2026
//
// symbol and timeframe come back as stored in the file, unescaped (the
// package tests check this with DuckDB). Timeframes differ only by case
// ("1m" minutes, "1M" months), so a file:// lake needs a case-sensitive
// file system.
package s3parquet
