// Package kafka is kandle's Kafka plumbing that is not a stage: how a client
// connects, what topics a topology needs, what offsets a group holds, and
// the in-process dev broker. The exactly-once consume–process–produce loop
// itself lives in the engine, which builds its franz-go clients from the
// options returned here.
//
// Why it looks the way it does:
//
//   - One place decides how kandle reaches a cluster. ClientOpts turns the
//     topology's kafka block into kgo options (TLS with system roots plus an
//     optional CA, an optional client certificate; SASL PLAIN, SCRAM or AWS
//     MSK IAM). Every client kandle makes for a topology's brokers takes
//     them, so a stage, a sink, replay and `kandle offsets` can never
//     disagree about authentication. Problems that can be seen locally (an
//     unset password variable, an unreadable certificate) are reported at
//     start, at the key in the topology file.
//   - Topics are created, never changed. EnsureTopics creates what is
//     missing (changelogs compacted) and reports an existing topic whose
//     partition count or configs differ as a TopicWarning: repartitioning a
//     keyed topic moves keys between partitions, which is the operator's
//     decision, not a side effect of starting a job.
//   - Offsets are read as a transaction would leave them. CommittedOffsets
//     waits for pending transactional commits (RequireStable), so `kandle
//     offsets` and the tests never read a half-committed group; EndOffsets
//     gives the high watermarks a caught-up consumer compares with.
//   - CheckSessionTimeout refuses a group session timeout the brokers
//     would reject, before any group is joined, with the allowed range.
//   - DevBroker wraps franz-go's kfake: a single-node broker on a loopback
//     port that speaks the real protocol (transactions, consumer groups,
//     compression, optional TLS and SASL), so `kandle dev-broker`, the demo
//     and the tests run the same client code paths as a deployed cluster,
//     and outside clients such as kcat can talk to it. It binds loopback
//     only, and a topology uses it only when it says `brokers: embedded`.
//
// This package never imports a processor or the engine.
package kafka
