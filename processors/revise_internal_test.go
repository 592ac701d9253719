package processors

import "github.com/kandle/kandle/candle"

// processAs is Process with the record's action forced to act: the tests'
// way to send cancels and corrections whatever the decoder maps.
func (a *Aggregator) processAs(rec Record, act candle.Action, out *Output) {
	if a.needResolve {
		a.resolve()
	}
	k, quote, ok := a.decodeRecord(rec, out)
	if ok {
		a.trade.Action = act
		a.apply(rec, k, quote, out)
		a.trade.Action = candle.ActionTrade
	}
}
