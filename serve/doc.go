// Package serve is kandle's read side: one candle API over the stores the
// sinks write, a live WebSocket stream and an embedded chart page.
//
// A candle request for [start, end) is routed by time. The part older than
// the hot horizon (the hot table's TTL) is read from the cold store (the
// S3 Parquet lake), the rest from the hot store (DynamoDB), and the open
// window from the live store's active hash (Valkey). The parts are stitched
// oldest first or newest first, one candle per open_time (a stored final
// wins over the active hash), gap candles included, in the output topics'
// JSON shape. Each store reads only what the page needs: a newest-first
// page reads the newest partitions first and stops at the limit, so a chart
// scrolling back through history pays for one page per request.
//
// The stream fans out the live store's pub/sub: each process holds one
// subscription per (symbol, timeframe) channel however many clients want it
// (reference counted), and each client has a bounded queue in which
// updates of the same candle are coalesced. Per window a client never
// receives an update older than one it already got (fewer trades, or
// anything after the final), while a window's final still reaches it
// after the next window opened; it starts with a snapshot of the open
// candle. A timeframe built at query time is streamed from the updates of
// the stored one it is built from. A client whose queue overflows is
// disconnected with the reason, so a slow client never slows others.
//
// The stores are small interfaces defined here (History, OpenWindow, Feed);
// cmd/kandle adapts the connectors' readers to them, and Memory implements
// all three in process for the demo.
package serve
