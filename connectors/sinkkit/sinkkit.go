// Package sinkkit is what every sink connector and the engine's sink stages
// share to survive outages: one retry pause policy (jittered exponential
// backoff), one way to wait for it under a context, one rejected-record
// error contract, and one test for "the store is not reachable" (as opposed to "the
// store said no").
//
// Transient failures (throttling, timeouts, lost connections) are retried
// with Backoff until the store answers or the context ends, so an outage
// pauses a sink and never loses data. A record the store refuses for good
// (a validation error, an item over the size limit, a key of the wrong type)
// comes back as a RejectedCandles (or RejectedTrades) error naming the
// store's reason: the engine
// dead-letters that record with reason sink_rejected and moves on.
package sinkkit

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/kandle/kandle/candle"
)

// Backoff is the retry pause policy: attempt n (0-based) waits a uniformly
// random duration in [d/2, d] with d = min(Min·2ⁿ, Max). The jitter keeps
// instances that failed together from retrying together.
type Backoff struct {
	Min, Max time.Duration
}

// The pauses sinks use unless their config says otherwise.
const (
	DefaultMin = 100 * time.Millisecond
	DefaultMax = 10 * time.Second
)

// Delay returns the pause before retry attempt n (0-based).
func (b Backoff) Delay(n int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi < lo {
		hi = lo
	}
	d := hi
	if n < 62 {
		if x := lo << n; x > 0 && x < hi {
			d = x
		}
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends (then it returns context.Cause(ctx),
// which is ctx.Err() unless the canceller gave a cause).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// RejectedCandles is the one rejected-record error of candle sinks: the
// store refused these candles for good (retrying cannot help) and Error
// says why in the store's words. Everything else the call was given was
// taken. The engine dead-letters each refused candle with reason
// sink_rejected and that message, counts it, and moves on.
type RejectedCandles interface {
	error
	Candles() []candle.Candle
}

// RejectedTrades is the same for sinks fed raw trades (a ledger).
type RejectedTrades interface {
	error
	Trades() []candle.Trade
}

// IsRejected reports whether err (or an error it wraps) refuses records
// for good.
func IsRejected(err error) bool {
	var rc RejectedCandles
	var rt RejectedTrades
	return errors.As(err, &rc) || errors.As(err, &rt)
}

// Unreachable reports whether err means nothing answered at the network
// level (refused or reset connections, timeouts, unknown hosts): the store
// or broker is down or not up yet, so the caller should wait and retry
// rather than give up. Errors a server sent back (bad credentials, a
// missing bucket) are not unreachable: they need an operator.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &op), errors.As(err, &dns),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var to interface{ Timeout() bool }
	return errors.As(err, &to) && to.Timeout()
}
