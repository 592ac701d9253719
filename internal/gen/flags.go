package gen

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// RegisterFlags adds a flag for every field of c to fs, bound to c and
// defaulting to c's current values (call it on DefaultConfig()).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*listFlag)(&c.Symbols), "symbols", "comma-separated symbols (record keys)")
	fs.IntVar(&c.Count, "count", c.Count, "records to make, every kind counted (0 = unbounded)")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "records per second (0 = as fast as possible)")
	fs.Var((*timeFlag)(&c.Start), "start", "first event time, RFC 3339 or \"now\" (empty = "+DefaultStart.Format(time.RFC3339)+")")
	fs.DurationVar(&c.Span, "span", c.Span, "spread the event times of -count records evenly over this duration")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed: the same seed gives the same records")
	fs.StringVar(&c.StartPrice, "start-price", c.StartPrice, "first price of every symbol (decimal)")
	fs.IntVar(&c.PriceDecimals, "price-decimals", c.PriceDecimals, "decimal places of prices (0..12)")
	fs.IntVar(&c.QtyDecimals, "qty-decimals", c.QtyDecimals, "decimal places of quantities (0..12)")
	fs.DurationVar(&c.Disorder, "disorder", c.Disorder, "largest backwards jitter of a trade's event time")
	fs.Float64Var(&c.DupRate, "dup-rate", c.DupRate, "fraction of records that repeat a recent trade verbatim (0..1)")
	fs.Float64Var(&c.MalformedRate, "malformed-rate", c.MalformedRate, "fraction of malformed records (0..1)")
	fs.StringVar(&c.TimeFormat, "time-format", c.TimeFormat, "event time format: ms (epoch milliseconds) or rfc3339")
	fs.StringVar(&c.Fields.Key, "field-key", c.Fields.Key, "JSON field name of the symbol")
	fs.StringVar(&c.Fields.TS, "field-ts", c.Fields.TS, "JSON field name of the event time")
	fs.StringVar(&c.Fields.Price, "field-price", c.Fields.Price, "JSON field name of the price")
	fs.StringVar(&c.Fields.Qty, "field-qty", c.Fields.Qty, "JSON field name of the quantity")
	fs.StringVar(&c.Fields.ID, "field-id", c.Fields.ID, "JSON field name of the trade id")
	fs.StringVar(&c.Fields.Side, "field-side", c.Fields.Side, "JSON field name of the aggressor side, \"buy\" or \"sell\" (empty = no side)")
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("no symbols in %q", s)
	}
	*l = out
	return nil
}

type timeFlag time.Time

func (t *timeFlag) String() string {
	if time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).Format(time.RFC3339Nano)
}

func (t *timeFlag) Set(s string) error {
	switch s {
	case "":
		*t = timeFlag{}
		return nil
	case "now":
		*t = timeFlag(time.Now().UTC().Truncate(time.Millisecond))
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want RFC 3339 (2024-01-01T00:00:00Z) or now: %w", err)
	}
	*t = timeFlag(v)
	return nil
}
