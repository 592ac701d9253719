package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/processors"
)

// Recovery: a stage never takes the process down with it. What a stage's
// run returns while kandle is not stopping — a broker or client error, a
// transaction that could not be ended nor aborted (the producer's state is
// then unknown), a fenced producer, a recovered panic — drops the stage's
// clients and its in-memory state; supervise builds it again, which
// restores from the last commit and rejoins the group (or retakes the
// leases), after a backoff. Only building a stage can fail kandle (its
// configuration), besides the checks Run makes before any stage starts.
//
// A panic inside a processor is caught where the processor is called
// (processGuarded) and ends the open transaction like an abort: the
// partition is rebuilt from its last commit and its records are read again.
// The engine remembers the record that panicked (stage, partition or shard,
// position); when the same record has panicked the processor twice, it is
// no longer given to the processor but dead-lettered with reason
// internal_error (the stack is in the log of each panic), so one record
// cannot make a group loop on it. Replay and `kandle test` run the
// processors in process (Pipeline) and handle a panicking record the same
// way, so their output equals the live one for it too.

// panicLimit is how many times a record may panic its processor before it
// is dead-lettered instead of processed.
const panicLimit = 2

// errProcessorPanic marks the error of a recovered processor panic.
var errProcessorPanic = errors.New("processor panicked")

// panicKey names one input record of one stage: the partition (Kafka) or
// shard (Kinesis) and its position in it.
type panicKey struct {
	stage, src string
	pos        int64
}

// panicBook counts the panics of each record for the engine's lifetime
// (across stage rebuilds, which is what makes a record's second panic its
// last).
type panicBook struct {
	mu sync.Mutex
	n  map[panicKey]int
}

func (b *panicBook) count(k panicKey) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[k]
}

func (b *panicBook) add(k panicKey) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == nil {
		b.n = map[panicKey]int{}
	}
	b.n[k]++
	return b.n[k]
}

// processGuarded gives rec to proc like stageSpec.process, but a panic of
// the processor is recovered and returned (wrapping errProcessorPanic,
// with the stack logged); the processor's state is then undefined and the
// caller must rebuild it from its last commit. A record that already
// panicked panicLimit times is dead-lettered (internal_error) instead.
// src names the partition or shard, pos the record's position in it.
func (e *Engine) processGuarded(spec *stageSpec, proc processor, src string, pos int64, rec processors.Record, out *processors.Output) error {
	key := panicKey{spec.Name, src, pos}
	if n := e.panics.count(key); n >= panicLimit {
		out.Rejected = append(out.Rejected, internalError(rec, n))
		return nil
	}
	if pp := processCatching(spec, proc, rec, out); pp != nil {
		n := e.panics.add(key)
		e.m.panics.WithLabelValues(spec.Name).Inc()
		pp.log(e.log, "processor panicked; rebuilding the partition from its last commit", spec.Name, src, pos, n)
		return fmt.Errorf("stage %s %s position %d: %w: %v", spec.Name, src, pos, errProcessorPanic, pp.value)
	}
	return nil
}

// quietGuarded hands a quiet mark to a fused rollup (q) like
// processGuarded hands a record to a processor: a panic is recovered,
// logged and counted, and aborts the transaction; a mark that panicked it
// panicLimit times is passed on without it.
func (e *Engine) quietGuarded(spec *stageSpec, q quieter, src string, pos int64, m processors.QuietMark, out *processors.Output) error {
	return e.callGuarded(spec, src, pos, func(int) { out.Quiet = append(out.Quiet, m) }, func() { q.Quiet(m, out) })
}

// takeGuarded hands a candle in memory to a fused rollup (t) like
// processGuarded hands it its JSON: a candle that panicked it panicLimit
// times is dead-lettered (internal_error; its value filled in by the
// caller) instead.
func (e *Engine) takeGuarded(spec *stageSpec, t candleTaker, src string, pos int64, rec processors.Record, c *candle.Candle, out *processors.Output) error {
	return e.callGuarded(spec, src, pos, func(n int) { out.Rejected = append(out.Rejected, internalError(rec, n)) },
		func() { t.Take(rec, c, out) })
}

// callGuarded runs fn, a fused processor taking the input at position pos,
// recovering, logging and counting a panic, which it returns as an error
// (the transaction aborts); at an input that panicked panicLimit times it
// runs skip instead, with that count.
func (e *Engine) callGuarded(spec *stageSpec, src string, pos int64, skip func(n int), fn func()) (err error) {
	key := panicKey{spec.Name, src, pos}
	if n := e.panics.count(key); n >= panicLimit {
		skip(n)
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			pp := &processorPanic{value: r, stack: debug.Stack()}
			n := e.panics.add(key)
			e.m.panics.WithLabelValues(spec.Name).Inc()
			pp.log(e.log, "processor panicked; rebuilding the partition from its last commit", spec.Name, src, pos, n)
			err = fmt.Errorf("stage %s %s position %d: %w: %v", spec.Name, src, pos, errProcessorPanic, pp.value)
		}
	}()
	fn()
	return nil
}

// processorPanic is a recovered panic of a processor and its stack.
type processorPanic struct {
	value any
	stack []byte
}

// processCatching gives rec to proc like stageSpec.process and returns the
// panic of the processor, if it panicked (its state is then undefined: the
// caller rebuilds it from its last commit). The live stages (through
// processGuarded) and the in-process Pipeline (replay, kandle test) both
// catch processor panics here.
func processCatching(spec *stageSpec, proc processor, rec processors.Record, out *processors.Output) (pp *processorPanic) {
	defer func() {
		if r := recover(); r != nil {
			pp = &processorPanic{value: r, stack: debug.Stack()}
		}
	}()
	spec.process(proc, rec, out)
	return nil
}

// log writes the panic's error line, with its stack.
func (pp *processorPanic) log(l *slog.Logger, msg, stage, src string, pos int64, times int) {
	l.Error(msg, "stage", stage, "source", src, "position", pos, "panic", fmt.Sprint(pp.value), "times", times, "stack", string(pp.stack))
}

// internalError is the dead letter of a record that panicked its processor
// n times and is skipped.
func internalError(rec processors.Record, n int) processors.Rejection {
	return processors.Rejection{Reason: processors.ReasonInternalError,
		Detail:    "the processor panicked on this record " + strconv.Itoa(n) + " times (the stacks are in the log); it is skipped",
		Key:       printableKey(rec.Key),
		Partition: rec.Partition, Offset: rec.Offset, Value: rec.Value}
}

// printableKey is the record key for a dead letter's key member: the key
// when it is text, else none (the record itself is in the dead letter).
func printableKey(k []byte) string {
	if !utf8.Valid(k) {
		return ""
	}
	return string(k)
}

// recovered turns a panic of fn into an error (with the stack logged), for
// the goroutines a stage owns.
func (e *Engine) recovered(stage string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.m.panics.WithLabelValues(stage).Inc()
			e.log.Error("stage panicked; rebuilding it from the last commit", "stage", stage, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("stage %s: %w: %v", stage, errProcessorPanic, r)
		}
	}()
	return fn()
}

// Restart backoff of a stage that failed: doubling from restartMin up to
// restartMax; a stage that ran restartReset without failing starts over.
const (
	restartMin   = time.Second
	restartMax   = 30 * time.Second
	restartReset = time.Minute
)

// supervise runs a stage until ctx ends. run is the stage built by the
// caller (a configuration error there stops kandle before it starts);
// whenever run fails while ctx is live, the stage is logged, counted and
// built again with build after a backoff — its new clients rejoin and
// restore from the last commit. supervise returns nil once ctx ends, or
// build's error (configuration).
func (e *Engine) supervise(ctx context.Context, name string, run func(context.Context) error, build func() (func(context.Context) error, error)) error {
	wait := restartMin
	for {
		began := time.Now()
		err := e.recovered(name, func() error { return run(ctx) })
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("stopped by itself")
		}
		if time.Since(began) >= restartReset {
			wait = restartMin
		}
		e.m.restarts.WithLabelValues(name).Inc()
		if isFencedProducer(err) {
			e.log.Warn("stage fenced: this instance lost its partitions while it was paused; rejoining with a new producer",
				"stage", name, "err", err)
		} else {
			e.log.Error("stage failed; dropping its clients and rebuilding it from the last commit", "stage", name, "err", err, "retry_in", wait)
		}
		e.health.moved(name, "", nil) // not in sync again before its first turn
		if sinkkit.Sleep(ctx, wait) != nil {
			return nil
		}
		wait = min(2*wait, restartMax)
		if run, err = build(); err != nil {
			return err
		}
	}
}
