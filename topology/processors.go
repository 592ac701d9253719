package topology

// ProcessorKind describes one processor kind to parsing, validation and
// the engine: what it reads and what its output topic holds.
type ProcessorKind struct {
	Name string // the value of a processor's kind key
	Doc  string // one sentence for docs
	// FromProcessor: it reads another processor's candles (else a source's records).
	FromProcessor bool
	// Timeframe: it needs a timeframe.
	Timeframe bool
	// Candles: its output topic holds candles, so a rollup may read it.
	Candles bool
}

// ProcessorKinds lists the processor kinds, in the order of the kind enum
// of Processor.
func ProcessorKinds() []ProcessorKind {
	return []ProcessorKind{
		{Name: "candles", Doc: "aggregates a source's trades (or readings) into candles", Timeframe: true, Candles: true},
		{Name: "rollup", Doc: "combines the closed candles of another processor into a higher timeframe", FromProcessor: true, Timeframe: true, Candles: true},
		{Name: "silence", Doc: "emits events when a device (the source's key) sends nothing for the levels' delays, and when it reports again"},
	}
}

// KindOf returns the kind of p (ok false for an unknown kind).
func KindOf(p *Processor) (ProcessorKind, bool) {
	for _, k := range ProcessorKinds() {
		if k.Name == p.Kind {
			return k, true
		}
	}
	return ProcessorKind{}, false
}
