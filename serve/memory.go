package serve

import (
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/kandle/kandle/candle"
)

// Memory is an in-process store for a single process that runs the
// pipeline and the server together (kandle demo): it keeps the newest
// max closed candles of every series (Add, fed from the output topics), the
// open candle of every series (Active, fed by the processors as a
// LivePublisher) and publishes both to the stream. It implements History,
// OpenWindow and Feed. Memory is bounded by max × the number of series; it
// is not shared between processes, so production uses the sinks' stores.
type Memory struct {
	max int

	mu     sync.Mutex
	closed map[key][]candle.Candle // sorted by open_time
	open   map[key]candle.Candle
	subs   map[key]bool
	fn     func(Update)
}

// NewMemory returns an empty store keeping at most max closed candles per
// series (oldest dropped first).
func NewMemory(max int) *Memory {
	return &Memory{max: max, closed: map[key][]candle.Candle{}, open: map[key]candle.Candle{}, subs: map[key]bool{}}
}

// Add stores final candles (an upsert by open_time) and publishes them; a
// candle whose rev is below the stored one of its window is dropped.
func (m *Memory) Add(cs ...candle.Candle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cs {
		k := key{c.Symbol, c.Timeframe}
		s := m.closed[k]
		i := sort.Search(len(s), func(i int) bool { return s[i].OpenTime >= c.OpenTime })
		if i < len(s) && s[i].OpenTime == c.OpenTime {
			if s[i].Rev > c.Rev {
				continue // an older revision: neither stored nor published
			}
			s[i] = c
		} else {
			s = slices.Insert(s, i, c)
			if len(s) > m.max {
				s = slices.Delete(s, 0, len(s)-m.max)
			}
		}
		m.closed[k] = s
		if o, ok := m.open[k]; !ok || o.OpenTime < c.OpenTime || (o.OpenTime == c.OpenTime && o.Rev <= c.Rev) {
			m.open[k] = c
		}
		m.publish(k, Update{Candle: c, Final: true})
	}
}

// Active records the open candle of a series and publishes it. It never
// blocks (engine.LivePublisher).
func (m *Memory) Active(c candle.Candle) {
	k := key{c.Symbol, c.Timeframe}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.open[k]; ok && o.OpenTime > c.OpenTime {
		return // a late trade's update of an older window
	}
	m.open[k] = c
	m.publish(k, Update{Candle: c})
}

func (m *Memory) publish(k key, u Update) {
	if m.fn != nil && m.subs[k] {
		m.fn(u)
	}
}

// Page implements History.
func (m *Memory) Page(_ context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.closed[key{symbol, tf.String()}]
	lo := sort.Search(len(s), func(i int) bool { return s[i].OpenTime >= from })
	hi := sort.Search(len(s), func(i int) bool { return s[i].OpenTime >= to })
	if lo >= hi {
		return nil, nil
	}
	s = s[lo:hi]
	if limit > 0 && len(s) > limit {
		if newestFirst {
			s = s[len(s)-limit:]
		} else {
			s = s[:limit]
		}
	}
	out := slices.Clone(s)
	if newestFirst {
		slices.Reverse(out)
	}
	return out, nil
}

// OpenCandle implements OpenWindow.
func (m *Memory) OpenCandle(_ context.Context, symbol, tf string) (candle.Candle, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.open[key{symbol, tf}]
	return c, ok, nil
}

// Symbols implements OpenWindow.
func (m *Memory) Symbols(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k := range m.open {
		if !seen[k.symbol] {
			seen[k.symbol] = true
			out = append(out, k.symbol)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Subscribe implements Feed.
func (m *Memory) Subscribe(_ context.Context, symbol, tf string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs[key{symbol, tf}] = true
	return nil
}

// Unsubscribe implements Feed.
func (m *Memory) Unsubscribe(_ context.Context, symbol, tf string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.subs, key{symbol, tf})
	return nil
}

// Run implements Feed: updates go to fn until ctx ends.
func (m *Memory) Run(ctx context.Context, fn func(Update)) error {
	m.mu.Lock()
	m.fn = fn
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.fn = nil
	m.mu.Unlock()
	return nil
}
