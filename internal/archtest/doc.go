// Package archtest holds the test that guards kandle's layering (run by
// `go test ./internal/archtest`, part of make test). The packages sit on
// floors, and a package imports only from its own floor group or below:
//
//	0  decimal, internal/invariant, internal/testkit
//	1  candle, the root package (embedded files), internal/gen
//	2  topology (and topology/spec)
//	3  processors
//	4  state
//	5  connectors/<kind> (and connectors/sinkkit)
//	6  engine (and engine/topotest)
//	7  serve; internal/sinks (the sink wiring of the commands)
//	8  cmd/kandle, deploy, scripts (helper programs of the make targets)
//
// so there is no import cycle between floors. On top of that, named rules
// (each failure names the file and the rule):
//
//   - a connector never imports a processor or the engine (nor serve or a
//     command), directly or through another package of the module;
//   - processors never import a concrete connector, and serve never imports
//     a connector: serve reads stores through its own interfaces, which the
//     commands fill with connectors;
//   - a processor file (processors/, not its tests) never reads the wall
//     clock or sleeps (time.Now, time.Since, time.Until, time.Sleep,
//     time.After, time.Tick, time.NewTimer, time.NewTicker, time.AfterFunc):
//     time comes from the records and an injected Clock. The one exception
//     is SystemClock.Now, the Clock live runs inject.
//
// Only non-test files count: a test may import what it needs. A new
// top-level package fails the test until it is given a floor in floors.
package archtest
