// Package topology reads a topology YAML file — sources, candle and rollup
// processors, sinks — validates it, and answers the questions the engine asks
// of it (stage order, zones, timeframes).
//
// The schema is the set of tagged structs in model.go; package spec turns
// those tags into parsing, defaults, messages and docs/reference.md, so the
// four cannot disagree. On top of that, validation here checks what tags
// cannot express: names that must refer to each other, rollup chains whose
// windows must nest, topics that must not collide. Every problem is reported
// at once, each with file:line:col and a hint on how to fix it, because an
// analyst editing YAML should fix a file in one pass, not one error per run.
//
// Sink connectors own their config structs. cmd/kandle passes them in a
// Registry, so this package never imports a connector.
//
// Processor kinds are values of ProcessorKind: its facts (what the kind
// reads, whether it needs a timeframe, whether its output holds candles a
// rollup may read) drive the checks every kind shares, Validate adds its
// own, and Fingerprint lists the settings its state depends on. candles,
// rollup and silence are built in; Registry.Processors adds a kind (it
// must also implement engine.ProcessorKind for the engine to run it). A
// kind's settings are keys of Processor: a kind that needs new keys adds
// them to model.go.
package topology

import _ "time/tzdata" // zones resolve the same on every machine, with or without system tzdata
