package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/twmb/franz-go/pkg/kerr"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/connectors/kafka"
	"github.com/kandle/kandle/connectors/sinkkit"
	"github.com/kandle/kandle/processors"
	"github.com/kandle/kandle/state"
	"github.com/kandle/kandle/topology"
)

// CandleSink is a store that closed candles are written to (DynamoDB, S3
// Parquet, Valkey finals, Kinesis). Write may buffer; after Flush returns nil
// everything written is durable, so the sink stage may commit its offsets.
// Writes must be idempotent upserts: after a crash candles are delivered again.
type CandleSink interface {
	Write(ctx context.Context, cs []candle.Candle) error
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// TradeSink is a sink fed from a source (the raw trade ledger).
type TradeSink interface {
	WriteTrades(ctx context.Context, ts []candle.Trade) error
}

// LivePublisher receives open (not yet final) candles from the processor
// stage that owns their key. Active must not block.
type LivePublisher interface {
	Active(c candle.Candle)
}

// Engine runs a topology against Kafka.
type Engine struct {
	top            *topology.Topology
	g              *graph
	log            *slog.Logger
	reg            prometheus.Registerer
	m              *metrics
	stateDir       string
	store          *state.Store
	instance       string
	static         bool // join consumer groups as a static member named instance
	clock          processors.Clock
	brokers        []string
	security       []kgo.Opt // TLS and SASL from the topology's kafka block; nil for the embedded broker
	commitInterval time.Duration
	txnTimeout     time.Duration
	sessionTimeout time.Duration
	sinks          map[string]CandleSink
	live           map[string][]LivePublisher
	only           map[string]bool
	devBroker      *kafka.DevBroker
	devListen      string
	health         *health
	readyLag       int64
	stallAfter     time.Duration
	panics         panicBook // records that panicked their processor (recover.go)
	// endTxnHook, when set (tests only), ends a Kafka stage's transactions
	// instead of the session's End: it injects faults.
	// dropRevokeHook, when set (tests only) and true for a stage, hides a
	// revoke from it, as kgo's transact session does for a second revoke
	// before End.
	dropRevokeHook func(stage string) bool
	endTxnHook     func(ctx context.Context, sess *kgo.GroupTransactSession, try kgo.TransactionEndTry) (bool, error)
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithRegisterer registers the engine's metrics on reg (default: a private registry).
func WithRegisterer(reg prometheus.Registerer) Option { return func(e *Engine) { e.reg = reg } }

// WithStateDir keeps Pebble state in dir ("" = in memory, rebuilt from the changelog on start).
func WithStateDir(dir string) Option { return func(e *Engine) { e.stateDir = dir } }

// WithInstanceID names this instance: its transactional ids derive from it,
// so a restarted instance with the same id fences its previous incarnation.
// Default: the host name.
func WithInstanceID(id string) Option { return func(e *Engine) { e.instance = id } }

// WithClock sets the wall clock processors use for idle advance and the
// future guard (default the system clock).
func WithClock(c processors.Clock) Option { return func(e *Engine) { e.clock = c } }

// WithBrokers overrides the topology's brokers.
func WithBrokers(seeds []string) Option { return func(e *Engine) { e.brokers = seeds } }

// WithDevBrokerListen sets where an embedded dev broker listens (default 127.0.0.1:9092).
func WithDevBrokerListen(addr string) Option { return func(e *Engine) { e.devListen = addr } }

// WithTransactionTimeout sets the Kafka transaction timeout (default 10s):
// how long a dead instance's open transaction can hold back readers.
func WithTransactionTimeout(d time.Duration) Option { return func(e *Engine) { e.txnTimeout = d } }

// WithSessionTimeout sets the consumer group session timeout (default 10s).
func WithSessionTimeout(d time.Duration) Option { return func(e *Engine) { e.sessionTimeout = d } }

// WithStaticMembership makes the instance a static member of its consumer
// groups (the processor stages' and the sinks'), with the instance id as its
// group instance id. A static member does not leave its groups when it
// stops: restarted with the same instance id inside the session timeout, it
// gets its partitions back without a rebalance. A stopped instance that does
// not come back keeps its partitions idle until the session timeout ends.
func WithStaticMembership(on bool) Option { return func(e *Engine) { e.static = on } }

// WithReadyLag sets how many input records a stage or sink may be behind
// its partitions' high watermarks and still answer ready (default
// DefaultReadyLag).
func WithReadyLag(records int64) Option { return func(e *Engine) { e.readyLag = records } }

// WithStallAfter sets how long a stage or sink loop may go without a turn
// before the engine counts as not alive (default DefaultStallAfter).
func WithStallAfter(d time.Duration) Option { return func(e *Engine) { e.stallAfter = d } }

// WithSink attaches the connector instance of the topology sink name.
func WithSink(name string, s CandleSink) Option { return func(e *Engine) { e.sinks[name] = s } }

// WithLive attaches a live publisher to the processor stage name.
func WithLive(stage string, lp LivePublisher) Option {
	return func(e *Engine) { e.live[stage] = append(e.live[stage], lp) }
}

// WithOnly runs only the named stages and sinks (default: all).
func WithOnly(names ...string) Option {
	return func(e *Engine) {
		for _, n := range names {
			e.only[n] = true
		}
	}
}

// New prepares an engine for t. It starts nothing until Run.
func New(t *topology.Topology, opts ...Option) (*Engine, error) {
	g, err := buildGraph(t)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	e := &Engine{top: t, g: g, log: slog.Default(), instance: host, clock: processors.SystemClock{},
		commitInterval: t.Commit, txnTimeout: 10 * time.Second, sessionTimeout: 10 * time.Second,
		sinks: map[string]CandleSink{}, live: map[string][]LivePublisher{}, only: map[string]bool{},
		devListen: "127.0.0.1:9092"}
	for _, o := range opts {
		o(e)
	}
	if e.commitInterval <= 0 {
		e.commitInterval = 25 * time.Millisecond
	}
	if e.reg == nil {
		e.reg = prometheus.NewRegistry()
	}
	if e.m, err = newMetrics(e.reg); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if e.health, err = newHealth(e.reg, e.clock.Now); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if e.readyLag > 0 {
		e.health.maxLag = e.readyLag
	}
	if e.stallAfter > 0 {
		e.health.stall = e.stallAfter
	}
	e.health.onChange = func(ready bool, why string) {
		if ready {
			e.log.Info("ready")
		} else {
			e.log.Warn("not ready", "why", why)
		}
	}
	if len(e.brokers) == 0 && !t.Brokers.Embedded() {
		e.brokers = t.Brokers
	}
	if t.Kafka.Secured() {
		if len(e.brokers) == 0 {
			return nil, t.Kafka.Errorf(nil, "TLS and SASL need a broker that serves them, but brokers: embedded starts a plaintext one inside kandle; list the cluster's brokers (or pass -brokers), or try the settings with `kandle dev-broker --tls-cert ... --sasl-user ...`")
		}
		if e.security, err = kafka.ClientOpts(t.Kafka); err != nil {
			return nil, err
		}
	}
	for name, sk := range t.Sinks {
		if _, ok := e.sinks[name]; !ok && e.runs(name) {
			return nil, fmt.Errorf("sink %s (kind %s) has no connector attached", name, sk.Kind)
		}
	}
	for _, s := range g.stages {
		if root := s.root(); s != root && e.runs(s.Name) && !e.runs(root.Name) {
			return nil, fmt.Errorf("processor %s runs fused into the stage of %s (it reads its output with the same key and partition count): run %s too, or set fuse: false on %s to run it as a stage of its own", s.Name, root.Name, root.Name, s.Name)
		}
	}
	e.m.zero(e)
	return e, nil
}

// clientID names this instance's Kafka clients, so group descriptions show
// which instance owns which partitions.
func (e *Engine) clientID() kgo.Opt { return kgo.ClientID("kandle-" + e.instance) }

// member returns what a consumer-group client adds to its options: the
// group instance id when the engine runs with static membership. The
// transactional id of a stage (group + "." + instance) is as stable as the
// instance id, so the restarted member's producer also fences the old one.
func (e *Engine) member() []kgo.Opt {
	if !e.static {
		return nil
	}
	return []kgo.Opt{kgo.InstanceID(e.instance)}
}

// kafkaOpts returns the options of a client for the topology's brokers:
// the seed brokers, TLS and SASL, then extra. Every kgo client the engine makes
// starts from it, so none can miss the security settings.
func (e *Engine) kafkaOpts(extra ...kgo.Opt) []kgo.Opt {
	opts := make([]kgo.Opt, 0, 1+len(e.security)+len(extra))
	opts = append(opts, kgo.SeedBrokers(e.brokers...))
	opts = append(opts, e.security...)
	return append(opts, extra...)
}

// newClient returns a client for brokers with the TLS and SASL settings of
// t, then extra: for the commands that run outside an Engine (replay,
// offsets), which get their brokers separately.
func newClient(t *topology.Topology, brokers []string, extra ...kgo.Opt) (*kgo.Client, error) {
	sec, err := kafka.ClientOpts(t.Kafka)
	if err != nil {
		return nil, err
	}
	opts := append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, sec...), extra...)
	return kgo.NewClient(opts...)
}

func (e *Engine) runs(name string) bool { return len(e.only) == 0 || e.only[name] }

// Brokers returns the seed brokers in use (after Run started an embedded one).
func (e *Engine) Brokers() []string { return e.brokers }

// Run starts every stage and blocks until ctx ends or a stage fails; on the
// way out each stage commits what it has and leaves its group. A cancel is
// a graceful shutdown and returns nil, also before the stages started
// (while waiting for the brokers or creating topics).
func (e *Engine) Run(ctx context.Context) error {
	if len(e.brokers) == 0 {
		b, err := kafka.StartDevBroker(kafka.WithListen(e.devListen), kafka.WithLogger(e.log))
		if err != nil {
			return fmt.Errorf("start embedded dev broker: %w", err)
		}
		e.devBroker = b
		defer b.Close()
		e.brokers = b.Addrs()
		e.log.Info("embedded dev broker started", "addrs", e.brokers)
	}
	store, err := state.Open(e.stateDir, e.log)
	if err != nil {
		return err
	}
	e.store = store
	defer store.Close()
	// A cancel before the stages run is a shutdown like any other: quiet.
	if err := e.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	start := func(name string, run func(context.Context) error) {
		e.health.moved(name, "", nil) // not in sync before its first turn
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
				cancel(err)
			}
		}()
	}
	for _, spec := range e.g.stages {
		if !e.runs(spec.Name) || spec.fusedInto != nil { // a fused processor runs in its chain's first stage
			continue
		}
		build := func() (func(context.Context) error, error) {
			if src := spec.kinesisSource(); src != nil {
				ks, err := newKinesisStage(e, spec, src)
				if err != nil {
					return nil, err
				}
				return ks.run, nil
			}
			st, err := newLiveStage(e, spec)
			if err != nil {
				return nil, err
			}
			return st.run, nil
		}
		run, err := build()
		if err != nil {
			cancel(err)
			wg.Wait()
			return err
		}
		start(spec.Name, func(ctx context.Context) error { return e.supervise(ctx, spec.Name, run, build) })
	}
	for name, sk := range e.top.Sinks {
		if !e.runs(name) {
			continue
		}
		build := func() (func(context.Context) error, error) {
			ss, err := newSinkStage(e, name, sk, e.sinks[name])
			if err != nil {
				return nil, err
			}
			return ss.run, nil
		}
		run, err := build()
		if err != nil {
			cancel(err)
			wg.Wait()
			return err
		}
		start("sink "+name, func(ctx context.Context) error { return e.supervise(ctx, "sink "+name, run, build) })
	}
	e.health.started()
	wg.Add(1)
	go func() { // keeps kandle_ready and the "not ready" log current between probes
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			e.health.status()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	e.log.Info("kandle running", "topology", e.top.Name, "instance", e.instance, "brokers", e.brokers)
	<-ctx.Done()
	wg.Wait()
	// Close sinks in parallel under one deadline: a sink that is down must not
	// add its timeout to every other's.
	cctx, c := context.WithTimeout(context.Background(), 10*time.Second)
	defer c()
	var cw sync.WaitGroup
	for name, s := range e.sinks {
		cw.Add(1)
		go func() {
			defer cw.Done()
			if err := s.Close(cctx); err != nil {
				e.log.Warn("closing sink", "sink", name, "err", err)
			}
		}()
	}
	cw.Wait()
	return errors.Join(errs...)
}

// Status answers the health probes: alive while every stage and sink loop
// turns, ready once the loops are running, their partitions assigned and
// restored, every sink's store reachable and no loop further behind than
// the ready lag. Reasons say what is missing.
func (e *Engine) Status() Status { return e.health.status() }

// prepare does what Run does before any stage starts: it creates the
// topology's topics (ensureTopics) and checks the processors' state
// fingerprints (checkFingerprints). An instance may start before Kafka
// does, or while it elects leaders or restarts, so while a step fails it
// waits (not ready, saying why), logs the error and the attempt, counts it
// in kandle_startup_retries_total{step}, and tries again after a backoff.
// Only what retrying cannot fix ends Run (see startupRefused): a
// configuration error — bad settings, topics laid out for another
// topology, an edit incompatible with the stored state, the brokers
// refusing the credentials, permissions or TLS, a local state store that
// fails — or ctx.
func (e *Engine) prepare(ctx context.Context) error {
	last := ""
	for attempt := 0; ; attempt++ {
		step := "topics"
		err := e.ensureTopics(ctx)
		if err == nil {
			step = "fingerprints"
			err = e.checkFingerprints(ctx)
		}
		if err == nil || ctx.Err() != nil || startupRefused(err) {
			return err
		}
		if step != last { // a step further: its backoff starts over
			last, attempt = step, 0
		}
		wait := sinkkit.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}.Delay(attempt)
		e.m.startupRetries.WithLabelValues(step).Inc()
		why := fmt.Sprintf("brokers %v answered an error (start-up step %s): %v", e.brokers, step, err)
		if sinkkit.Unreachable(err) {
			why = fmt.Sprintf("brokers %v unreachable: %v", e.brokers, err)
		}
		e.health.notRunning(why)
		e.health.status()
		e.log.Warn("waiting for the brokers", "step", step, "brokers", e.brokers, "attempt", attempt+1, "retry_in", wait, "err", err)
		if err := sinkkit.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// configError marks a start-up error that retrying cannot fix.
type configError struct{ error }

func (c configError) Unwrap() error { return c.error }

// startupRefused reports whether a start-up error ends Run: a
// configuration error, a topology edit incompatible with the stored state,
// or an answer of the brokers that needs an operator (kafka.Refused).
func startupRefused(err error) bool {
	var ce configError
	return errors.As(err, &ce) || errors.Is(err, ErrIncompatibleState) || kafka.Refused(err)
}

// ensureTopics creates every topic the topology uses that does not exist.
func (e *Engine) ensureTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(e.kafkaOpts()...)
	if err != nil {
		return configError{err}
	}
	defer cl.Close()
	if err := kafka.CheckAuth(ctx, cl, e.top.Kafka); err != nil {
		if !sinkkit.Unreachable(err) || kafka.Refused(err) {
			// TLS or SASL settings the brokers refuse; a broker that
			// hangs up during the login (kfake and some proxies answer a
			// failed login so) counts as refusing it.
			return configError{err}
		}
		return err
	}
	if err := kafka.CheckSessionTimeout(ctx, cl, e.sessionTimeout); err != nil {
		return configError{err}
	}
	warnings, err := kafka.EnsureTopics(ctx, cl, e.topicSpecs())
	if err != nil {
		return fmt.Errorf("create topics: %w", kafka.Explain(err, e.top.Kafka))
	}
	for _, w := range warnings {
		e.log.Warn("topic", "warning", w)
	}
	// Changelogs come second: a stage's changelog needs a partition for
	// every partition its input topic really has, whatever the topology
	// declares.
	specs, err := e.changelogSpecs(ctx, cl)
	if err != nil {
		return err
	}
	warnings, err = kafka.EnsureTopics(ctx, cl, specs)
	if err != nil {
		return fmt.Errorf("create changelog topics: %w", kafka.Explain(err, e.top.Kafka))
	}
	var errs []error
	for _, w := range warnings {
		// A changelog with too few partitions cannot hold every partition's
		// state, and one that is not compacted loses state to retention or
		// grows forever: neither can run.
		if w.Detail != "" {
			errs = append(errs, fmt.Errorf("changelog %s", w))
		} else {
			errs = append(errs, fmt.Errorf("changelog topic %q has %d partitions but its input has %d: add partitions with `kafka-topics --alter --topic %s --partitions %d` (a changelog partition holds the state of the input partition with the same number)",
				w.Topic, w.Have, w.Want, w.Topic, w.Want))
		}
	}
	if len(errs) > 0 {
		return configError{errors.Join(errs...)}
	}
	return nil
}

// topicSpecs lists the topics the topology reads and writes, except the
// changelogs (see changelogSpecs).
func (e *Engine) topicSpecs() []kafka.TopicSpec {
	var specs []kafka.TopicSpec
	seen := map[string]bool{}
	add := func(s kafka.TopicSpec) {
		if s.Name != "" && !seen[s.Name] {
			seen[s.Name] = true
			specs = append(specs, s)
		}
	}
	for _, src := range e.top.Sources {
		if !src.IsKinesis() {
			add(kafka.TopicSpec{Name: src.Topic, Partitions: int32(src.Partitions)})
		}
	}
	for _, s := range e.g.stages {
		add(kafka.TopicSpec{Name: s.OutputTopic, Partitions: int32(s.OutputParts)})
	}
	dl := e.top.DeadLetter.Partitions
	if dl < 1 {
		dl = 1
	}
	add(kafka.TopicSpec{Name: e.g.deadLetterTopic(), Partitions: int32(dl)})
	return specs
}

// changelogSpecs lists every stage's compacted changelog with as many
// partitions as its input topic has on the broker (Kinesis stages: as the
// topology declares, shards hash onto them).
func (e *Engine) changelogSpecs(ctx context.Context, cl *kgo.Client) ([]kafka.TopicSpec, error) {
	var inputs []string
	for _, s := range e.g.stages {
		if !e.kinesisInput(s) {
			inputs = append(inputs, s.InputTopic)
		}
	}
	have, err := kafka.PartitionCounts(ctx, cl, inputs)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, s := range e.g.stages {
		if up := s.fusedInto; up != nil && have[s.InputTopic] != have[up.InputTopic] {
			errs = append(errs, fmt.Errorf("processor %s runs fused into %s, but its input topic %s has %d partitions on the brokers and %s's input %s has %d: a fused processor's partition must hold the keys of its upstream's; set fuse: false on %s, or give the topics the same partition count",
				s.Name, up.Name, s.InputTopic, have[s.InputTopic], up.Name, up.InputTopic, have[up.InputTopic], s.Name))
		}
	}
	if len(errs) > 0 {
		return nil, configError{errors.Join(errs...)}
	}
	var specs []kafka.TopicSpec
	for _, s := range e.g.stages {
		n := int32(e.inputPartitions(s))
		if !e.kinesisInput(s) {
			if h, ok := have[s.InputTopic]; ok && h > n {
				n = h
			}
		}
		specs = append(specs, kafka.TopicSpec{Name: e.g.changelogTopic(s.Name), Partitions: n, Compacted: true})
	}
	return specs, nil
}

func (e *Engine) kinesisInput(s *stageSpec) bool { return s.kinesisSource() != nil }

// inputPartitions is the partition count of a stage's input topic, which is
// also the partition count of its changelog.
func (e *Engine) inputPartitions(s *stageSpec) int {
	if s.Rollup {
		return e.g.byName[s.Input].OutputParts
	}
	if src := e.top.Sources[s.Input]; src != nil && src.Partitions > 0 {
		return src.Partitions
	}
	return 1
}

// isFencedProducer reports a transactional producer fenced for good: only
// a new client (a new InitProducerID) can produce again. INVALID_TXN_STATE
// belongs here too: a zombie thawed after the coordinator aborted its
// transaction and bumped its epoch gets it from EndTxn, and the client then
// refuses every Begin ("producer ID has a fatal, unrecoverable error").
func isFencedProducer(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidTxnState)
}
