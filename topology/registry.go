package topology

import (
	"maps"
	"slices"
)

// SinkKind describes one sink connector to the parser.
type SinkKind struct {
	Name string // the value of a sink's kind key, e.g. "dynamodb"
	Doc  string // one paragraph for docs/reference.md
	// New returns a pointer to a fresh, tagged config struct of the connector.
	// The sink's keys other than kind and from are decoded into it.
	New func() any
	// Validate, optional, returns extra problems with a decoded config, each
	// a sentence saying what to change.
	Validate func(cfg any) []string
}

// Registry lists the sink kinds a topology may use, and the processor kinds
// it may use besides the built-in ones (candles, rollup, silence). The zero
// Registry has no sink kinds and only the built-in processor kinds.
type Registry struct {
	Sinks map[string]SinkKind
	// Processors adds processor kinds by name (a built-in name is taken
	// over by the registered kind).
	Processors map[string]ProcessorKind
}

func (r Registry) kinds() []string {
	return slices.Sorted(maps.Keys(r.Sinks))
}
