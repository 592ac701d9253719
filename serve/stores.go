package serve

import (
	"context"

	"github.com/kandle/kandle/candle"
)

// History is a store of closed candles (the hot table or the cold lake).
type History interface {
	// Page returns at most limit candles (limit <= 0: all) of one series
	// with open_time in [from, to): the oldest first, or with newestFirst
	// the newest first.
	Page(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error)
}

// OpenWindow gives the newest candle of a series (the open window, or the
// last final when no newer window has opened) and the symbols it knows.
type OpenWindow interface {
	OpenCandle(ctx context.Context, symbol, tf string) (candle.Candle, bool, error)
	Symbols(ctx context.Context) ([]string, error)
}

// Update is one published candle change.
type Update struct {
	Candle candle.Candle
	Final  bool
}

// Feed is a pub/sub source of candle updates with per-series channels.
type Feed interface {
	// Subscribe and Unsubscribe change the set of series Run delivers.
	Subscribe(ctx context.Context, symbol, tf string) error
	Unsubscribe(ctx context.Context, symbol, tf string) error
	// Run delivers updates of subscribed series to fn (which does not
	// block) until ctx ends, reconnecting as needed.
	Run(ctx context.Context, fn func(Update)) error
}
