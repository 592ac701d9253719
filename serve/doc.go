// Package serve is kandle's read side: one candle API over the stores the
// sinks write, a live WebSocket stream and an embedded chart page.
//
// A candle request for [start, end) is routed by time. The part older than
// the hot horizon (the hot table's TTL) is read from the cold store (the
// S3 Parquet lake), the rest from the hot store (DynamoDB), and the open
// window from the live store's active hash (Valkey). The parts are stitched
// oldest first or newest first, one candle per open_time, gap candles
// included, in the output topics' JSON shape ("rev" included when above
// 0). Where more than one store holds a window the newest revision wins:
// the highest rev, and among equal revs a stored final over the active
// hash. With a revision horizon (Options.ReviseWithin) the hot store is
// also read that far before the hot horizon, so a window revised there is
// answered with its newest rev whichever of hot and cold got it first. Each store reads only what the page needs: a newest-first
// page reads the newest partitions first and stops at the limit, so a chart
// scrolling back through history pays for one page per request.
//
// The stream fans out the live store's pub/sub: each process holds one
// subscription per (symbol, timeframe) channel however many clients want it
// (reference counted), and each client has a bounded queue in which
// updates of the same candle are coalesced. Per window a client's updates
// are ordered by (final, rev), and live ones by trades: it never receives
// an update older than one it already got (fewer trades, a live state
// after the final, the final again, or a lower or equal rev after a
// final), while a window's final still reaches it after the next window
// opened, and so does a revision of a closed candle (a final with a
// higher rev), however many windows opened since: the client remembers
// the revs of up to 64 older windows it was sent a revision of. It starts
// with a snapshot of the open candle. A timeframe built at query time is
// streamed from the updates of the stored one it is built from; a
// revision of a sub-candle rebuilds its window (for the windows the
// series still holds), whose rev is the sum of its sub-candles' revs, as
// on the query side. The chart page redraws a revised bar in place. A client whose queue overflows is
// disconnected with the reason, so a slow client never slows others.
//
// The stores are small interfaces defined here (History, OpenWindow, Feed);
// cmd/kandle adapts the connectors' readers to them, and Memory implements
// all three in process for the demo.
package serve
