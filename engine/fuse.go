package engine

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/topology"
)

// Fused chains (see "Fused chains" in the package doc): a rollup that reads
// the output of another processor with the same key and partition count runs
// in the unit of that processor's input partition, in its transaction,
// taking its candles and quiet marks from memory.

// fuse decides, for every stage of g, whether it runs fused into the
// stage it reads (fusedInto) and which stages run fused into it (fused).
// A rollup is fused when its processor does not opt out (fuse: false), the
// stage it reads is not a Kinesis stage (shards are not partitions), both
// read the same key (the rollup's input is partitioned by symbol: keyed by
// it, or with a revision horizon by window, symbol@open_time, partitioned
// by the symbol part alone (outputPartitioner); a candles stage
// reads a source whose key_check holds its record keys to the symbol, or it
// is fused into a chain that does) and the rollup's input topic has as many
// partitions as the input of the stage it reads.
func (g *graph) fuse() {
	for _, s := range g.stages {
		if !s.Rollup || s.Processor == nil || !s.Processor.Fuse {
			continue
		}
		up := g.byName[s.Input]
		if up == nil || up.kinesisSource() != nil || !keyedBySymbol(up) {
			continue
		}
		if g.declaredInputParts(s) != g.declaredInputParts(up) {
			continue
		}
		s.fusedInto = up
		up.fused = append(up.fused, s)
	}
}

// keyedBySymbol reports whether the records of s's input are partitioned by
// the symbol its candles carry: a rollup's input (candles, keyed by symbol
// or by window on the symbol's partition) always are; a candles stage's
// when its source checks the record key (key_check).
func keyedBySymbol(s *stageSpec) bool {
	if s.Rollup {
		return true
	}
	return s.Source != nil && s.Source.KeyCheck && !s.Source.IsKinesis()
}

// declaredInputParts is the partition count the topology declares for s's
// input topic (the broker's may be larger: ensureTopics refuses a fused
// chain whose counts differ on the broker).
func (g *graph) declaredInputParts(s *stageSpec) int {
	if s.Rollup {
		if up := g.byName[s.Input]; up != nil {
			return up.OutputParts
		}
		return 0
	}
	if s.Source != nil && s.Source.Partitions > 0 {
		return s.Source.Partitions
	}
	return 1
}

// root is the stage whose unit runs s: s itself, or the first stage of the
// fused chain s belongs to.
func (s *stageSpec) root() *stageSpec {
	for s.fusedInto != nil {
		s = s.fusedInto
	}
	return s
}

// chain lists the stages fused into s, directly or through other fused
// stages, parents before children.
func (s *stageSpec) chain() []*stageSpec {
	var out []*stageSpec
	for i := -1; i < len(out); i++ {
		cur := s
		if i >= 0 {
			cur = out[i]
		}
		out = append(out, cur.fused...)
	}
	return out
}

// FusedInto returns, for every processor of t that runs fused, the
// processor whose stage runs it (the first of its chain). Processors that
// run as stages of their own are absent.
func FusedInto(t *topology.Topology) (map[string]string, error) {
	g, err := buildGraph(t)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range g.stages {
		if s.fusedInto != nil {
			out[s.Name] = s.root().Name
		}
	}
	return out, nil
}

// fusedStage is a processor fused into a live stage: what every partition's
// unit of it shares.
type fusedStage struct {
	spec      *stageSpec
	parent    int // index in liveStage.chain of the processor it reads; -1: the stage's own
	changelog string
	em        *emitter
	live      []LivePublisher

	accepted, rejected prometheus.Counter
}

// fusedUnit is the unit of a fused processor on one input partition of
// the stage: its running state, committed in the stage's transactions.
type fusedUnit struct {
	unit
	st   *fusedStage
	part int32
	src  string // "partition <n> (fused)", for logs and the panic book
	// nextOut is the unit's position on its input topic: the offset after
	// the last record of its input partition that its state reflects.
	nextOut int64
	// drained: out holds what the unit computed at its restore from the
	// records of its input topic it had not read yet (drainFused), not
	// produced yet.
	drained bool
	fed     int64 // records fed since the restore: their position in the panic book
	touched bool  // live updates since the last Active pass
	buf     []byte
}

// fusedChangelogs lists the changelogs of the processors fused into
// spec's stage.
func (e *Engine) fusedChangelogs(spec *stageSpec) []string {
	var out []string
	for _, c := range spec.chain() {
		out = append(out, e.g.changelogTopic(c.Name))
	}
	return out
}

// initChain sets up the processors fused into the stage.
func (s *liveStage) initChain() {
	chain := s.spec.chain()
	if len(chain) == 0 {
		return
	}
	s.txn.tracked = map[string]bool{}
	s.log.Info("processors fused into the stage", "fused", len(chain))
	idx := map[*stageSpec]int{s.spec: -1}
	for _, c := range chain {
		parent, ok := idx[c.fusedInto]
		if !ok || !s.e.runs(c.Name) {
			continue // not run by this instance (WithOnly), nor what is fused into it
		}
		idx[c] = len(s.chain)
		fs := &fusedStage{spec: c, parent: parent, changelog: s.e.g.changelogTopic(c.Name),
			em:       &emitter{e: s.e, spec: c, input: c.InputTopic, log: s.log.With("fused", c.Name)},
			live:     s.e.live[c.Name],
			accepted: s.e.m.records.WithLabelValues(c.Name, "accepted"), rejected: s.e.m.records.WithLabelValues(c.Name, "rejected")}
		s.chain = append(s.chain, fs)
		s.txn.tracked[fs.changelog] = true
		s.txn.tracked[c.InputTopic] = true
	}
}

// restoreChain restores the units of the fused processors on partition p,
// parents first, each from its own changelog; then it drains what each
// has not read of its input topic yet. It returns the changelog records
// read.
func (s *liveStage) restoreChain(ctx context.Context, ps *partState, p int32) (int, error) {
	n := 0
	for _, fs := range s.chain {
		proc, err := fs.spec.newProcessor(true, s.e.clock)
		if err != nil {
			return n, err
		}
		ref := unitRef{ns: fs.spec.Name, part: p, clPart: p, changelog: fs.changelog}
		st, err := s.e.restoreUnit(ctx, ref, s.partIO(p, fs.changelog, fs.spec.Name), !inStore(proc))
		if err != nil {
			return n, fmt.Errorf("fused %s: %w", fs.spec.Name, err)
		}
		if err := s.e.startProcessor(proc, ref, st.entries); err != nil {
			return n, fmt.Errorf("fused %s: %w (read from %s)", fs.spec.Name, err, st.source())
		}
		n += st.records
		fu := &fusedUnit{unit: unit{proc: proc, sinceSnap: int64(st.records), liveKeys: len(st.entries), snap: st.snap},
			st: fs, part: p, src: "partition " + strconv.Itoa(int(p)) + " (fused)", nextOut: st.progress.next}
		ps.chain = append(ps.chain, fu)
		if err := s.drainFused(ctx, ps, fu, p); err != nil {
			return n, fmt.Errorf("fused %s: %w", fs.spec.Name, err)
		}
	}
	return n, nil
}

// drainFused gives fu the records of its input partition p that its state
// does not reflect yet: from its position to the last stable offset. There
// are such records only when the processor ran as a stage of its own
// before and had not read all its upstream wrote (a topology that fuses
// it now): the stage that wrote them is this one, restoring p now, so
// nothing else is written there meanwhile. Then it takes what its parent
// drained, as it would have read it after those. What it emits is produced
// in the partition's next transaction (emitDrained).
func (s *liveStage) drainFused(ctx context.Context, ps *partState, fu *fusedUnit, p int32) error {
	topic := fu.st.spec.InputTopic
	ends, err := s.admin.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list the last stable offsets of %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, p)
	if !ok || end.Err != nil {
		return fmt.Errorf("no last stable offset of %s partition %d: %v", topic, p, end.Err)
	}
	fu.out.Reset()
	if fu.nextOut < end.Offset {
		read := 0
		err := s.readTopic(ctx, topic, p, fu.nextOut, end.Offset-1, func(r *kgo.Record) error {
			read++
			rec := processors.Record{Partition: p, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
			return s.e.processGuarded(fu.st.spec, fu.proc, fu.src, r.Offset, rec, &fu.out)
		})
		if err != nil {
			return fmt.Errorf("read what it has not taken of %s: %w", topic, err)
		}
		if read > 0 {
			s.log.Info("a processor now fused took what it had not read of its input topic", "fused", fu.st.spec.Name,
				"partition", p, "from", fu.nextOut, "to", end.Offset, "records", read)
			fu.consumed, fu.drained = true, true
		}
		fu.nextOut = end.Offset
	}
	if fu.st.parent >= 0 {
		if up := ps.chain[fu.st.parent]; up.drained {
			if err := s.feed(fu, &up.out); err != nil {
				return err
			}
			fu.consumed, fu.drained = true, true
		}
	}
	return nil
}

// emitDrained produces what the fused units of ps drained at their
// restore (the transaction is open).
func (s *liveStage) emitDrained(ctx context.Context, ps *partState) {
	for _, fu := range ps.chain {
		if fu.drained {
			s.txn.emitAs(ctx, fu.st.em, &fu.out, &fu.slab)
			fu.drained = false
			fu.out.Reset()
		}
	}
}

// feedChain hands what the partition's processor emitted (out, produced
// already) to the processors fused into it, each in turn handing its own
// output to those fused into it, in the order a stage reading the output
// topic would read them: the candles, then the quiet marks. What each
// emits is produced in the open transaction, to its own output topic.
func (s *liveStage) feedChain(ctx context.Context, ps *partState, out *processors.Output) error {
	if len(ps.chain) == 0 {
		return nil
	}
	s.emitDrained(ctx, ps)
	for _, fu := range ps.chain {
		in := out
		if fu.st.parent >= 0 {
			in = &ps.chain[fu.st.parent].out
		}
		fu.out.Reset()
		if len(in.Candles)+len(in.Quiet) == 0 {
			continue
		}
		if err := s.feed(fu, in); err != nil {
			return err
		}
		s.txn.emitAs(ctx, fu.st.em, &fu.out, &fu.slab)
	}
	return nil
}

// feed gives fu the candles and quiet marks of in, appending what it emits
// to fu.out.
func (s *liveStage) feed(fu *fusedUnit, in *processors.Output) error {
	spec := fu.st.spec
	rejected := len(fu.out.Rejected)
	t, isTaker := fu.proc.(candleTaker)
	for i := range in.Candles {
		c := &in.Candles[i]
		rec := processors.Record{Partition: fu.part, Offset: fu.fed}
		n := len(fu.out.Rejected)
		var err error
		if isTaker && readsBackAsIs(c) {
			err = s.e.takeGuarded(spec, t, fu.src, fu.fed, rec, c, &fu.out)
		} else {
			fu.buf = c.AppendJSON(fu.buf[:0])
			rec.Value = fu.buf
			err = s.e.processGuarded(spec, fu.proc, fu.src, fu.fed, rec, &fu.out)
		}
		if err != nil {
			return err
		}
		for j := n; j < len(fu.out.Rejected); j++ { // a dead letter keeps its record (the JSON), not the reused buffer
			r := &fu.out.Rejected[j]
			if r.Value == nil {
				r.Value = c.AppendJSON(nil)
			} else {
				r.Value = append([]byte(nil), r.Value...)
			}
		}
		fu.fed++
	}
	q, isQuieter := fu.proc.(quieter)
	for _, m := range in.Quiet {
		var err error
		if isQuieter {
			err = s.e.quietGuarded(spec, q, fu.src, fu.fed, m, &fu.out)
		} else {
			rec := processors.Record{Partition: fu.part, Offset: fu.fed, Key: []byte(m.Key), Value: appendQuiet(nil, spec.from.String(), m)}
			err = s.e.processGuarded(spec, fu.proc, fu.src, fu.fed, rec, &fu.out)
		}
		if err != nil {
			return err
		}
		fu.fed++
	}
	n := len(in.Candles) + len(in.Quiet)
	rej := len(fu.out.Rejected) - rejected
	fu.st.accepted.Add(float64(n - rej))
	fu.st.rejected.Add(float64(rej))
	fu.touched = true
	return nil
}

// candleTaker is what a rollup offers for candles in memory
// (processors.Rollup.Take).
type candleTaker interface {
	Take(rec processors.Record, c *candle.Candle, out *processors.Output)
}

// readsBackAsIs reports whether c is what a reader of its JSON
// (candle.AppendJSON) reads back, so a fused rollup may take it from
// memory instead (candleTaker) with the same result: the names printable
// UTF-8 and the window valid, as the parser requires; the trade ids valid
// UTF-8 (the JSON writes an invalid byte as \u00XX, read back as another
// character); taker volumes only on a candle that carries them. The
// candles and rollup processors write nothing else.
func readsBackAsIs(c *candle.Candle) bool {
	return c.Symbol != "" && c.Timeframe != "" && c.CloseTime > c.OpenTime &&
		candle.KeyProblem([]byte(c.Symbol)) == "" && candle.KeyProblem([]byte(c.Timeframe)) == "" &&
		utf8.ValidString(c.FirstTradeID) && utf8.ValidString(c.LastTradeID) &&
		(c.Taker || c.TakerBuyVolume.IsZero() && c.TakerBuyQuoteVolume.IsZero())
}

// chainUnits appends to units the parts of partition p's fused units in a
// commit: each follows its input topic (its position is the offset after
// the last record the transaction writes there), and writes its progress
// whenever the partition's does. What they drained at their restore is
// produced first, so it commits with the state it made.
func (s *liveStage) chainUnits(ctx context.Context, units []unitCommit, p int32, ps *partState) []unitCommit {
	s.emitDrained(ctx, ps)
	for _, fu := range ps.chain {
		fu.consumed = fu.consumed || ps.consumed
		units = append(units, unitCommit{u: &fu.unit, ref: unitRef{ns: fu.st.spec.Name, part: p, clPart: p, changelog: fu.st.changelog},
			src: fu.src, stage: fu.st.spec.Name, follows: fu.st.spec.InputTopic, progress: progressOf(fu.proc, fu.nextOut, "")})
	}
	return units
}

// chainCommitted moves the fused units of a committed transaction to the
// positions it committed.
func (s *liveStage) chainCommitted(units []unitCommit) {
	for _, c := range units {
		if c.follows == "" {
			continue
		}
		if ps := s.parts[c.ref.part]; ps != nil {
			for _, fu := range ps.chain {
				if &fu.unit == c.u {
					fu.nextOut = c.progress.next
				}
			}
		}
	}
}

// publishChain hands the changed open candles of the fused processors to
// their live publishers.
func (s *liveStage) publishChain() {
	for _, ps := range s.parts {
		for _, fu := range ps.chain {
			if !fu.touched {
				continue
			}
			fu.touched = false
			if len(fu.st.live) == 0 {
				continue
			}
			fu.proc.Active(func(c *candle.Candle) {
				for _, lp := range fu.st.live {
					lp.Active(*c)
				}
			})
		}
	}
}
