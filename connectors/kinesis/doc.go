// Package kinesis connects kandle to Amazon Kinesis Data Streams.
//
// A Kinesis shard plays the role a Kafka partition plays elsewhere in kandle:
// it has its own order, its own watermark and its own processor state. This
// package gives the engine three things:
//
//   - Consumer: a KCL-style shard consumer for a group of instances. Shard
//     leases live in a DynamoDB table; instances renew what they own, take
//     expired or free leases, balance by stealing one lease per round, and
//     fence stale owners with a conditional lease counter. A child shard is
//     opened only after all its parents were read to SHARD_END and
//     checkpointed, so per-key order survives resharding.
//   - ReadRange: a lease-free reader for replay that reads every shard from a
//     timestamp or sequence numbers up to the tip as of the start.
//   - Sink: a PutRecords writer for candles that retries only what failed and
//     keeps each key's records in order.
//
// Expiry is decided the way the KCL does it: a lease is expired when its
// counter has not changed for a lease duration as measured by the observer's
// own clock, so no machine ever trusts another machine's clock.
//
// A Consumer polls GetRecords by default. With ConsumerConfig.EnhancedFanOut
// it registers a stream consumer and reads each leased shard with
// SubscribeToShard (enhanced fan-out) instead, handing the Handler the same
// batches, positions and shard ends. ReadRange always polls.
//
// The package never imports processors or engine; it speaks candle and
// plain records only.
package kinesis
