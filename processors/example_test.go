package processors_test

import (
	"fmt"
	"time"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
)

// One Aggregator per input partition: feed it records, read closed candles
// and rejections from the Output, checkpoint Changes with the input offset.
func ExampleAggregator() {
	dec, err := processors.NewDecoder(processors.DecoderConfig{
		Fields: processors.Fields{Key: "s", Time: "T", Price: "p", Qty: "q", ID: "t"},
	})
	if err != nil {
		panic(err)
	}
	tf, _ := candle.ParseTimeframe("1m", nil)
	agg, err := processors.NewAggregator(processors.CandleConfig{
		Timeframe: tf, Lateness: 2 * time.Second, Dedupe: true, GapFill: true, Decoder: dec,
	}, processors.FixedClock{T: time.Now()})
	if err != nil {
		panic(err)
	}
	var out processors.Output
	for i, rec := range []string{
		`{"s":"BTCUSDT","T":1704103200000,"p":"42000.10","q":"0.5","t":1}`,
		`{"s":"BTCUSDT","T":1704103230000,"p":"42010","q":"0.25","t":2}`,
		`{"s":"BTCUSDT","T":1704103231000,"p":"42010","q":"0.25","t":2}`, // same id: duplicate
		`{"s":"BTCUSDT","T":1704103322000,"p":"41990","q":"1","t":3}`,    // W = 10:02:00: closes 10:00 and the 10:01 gap
	} {
		agg.Process(processors.Record{Offset: int64(i), Value: []byte(rec)}, &out)
	}
	for _, c := range out.Candles {
		fmt.Println(string(c.AppendJSON(nil)))
	}
	for _, r := range out.Rejected {
		fmt.Println(r.Reason, r.Offset)
	}
	entries := 0
	agg.Changes(func(key, val []byte) { entries++ }) // write these with the offset, atomically
	fmt.Println(entries > 0)
	// Output:
	// {"symbol":"BTCUSDT","timeframe":"1m","open_time":1704103200000,"close_time":1704103260000,"open":"42000.1","high":"42010","low":"42000.1","close":"42010","volume":"0.75","quote_volume":"31502.55","trades":2,"first_trade_id":"1","last_trade_id":"2","gap":false}
	// {"symbol":"BTCUSDT","timeframe":"1m","open_time":1704103260000,"close_time":1704103320000,"open":"42010","high":"42010","low":"42010","close":"42010","volume":"0","quote_volume":"0","trades":0,"gap":true}
	// duplicate 2
	// true
}
