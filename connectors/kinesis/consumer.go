package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kandle/kandle/internal/clock"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// ConsumerConfig holds the plain settings of a Consumer (topology.Kinesis maps onto it).
type ConsumerConfig struct {
	Stream     string // stream name (required)
	LeaseTable string // DynamoDB lease table, created if missing (required)
	// LeaseNamespace separates the leases of consumers that share a lease
	// table but must each read every shard (kandle: one per stage reading
	// the stream, like the KCL's application name). Leases are per
	// (namespace, shard): consumers of one namespace split the shards among
	// them. It must not contain '/'. Empty: the bare shard ids (one
	// application per table).
	LeaseNamespace string
	// Owner names this instance in the lease table; it must be unique among
	// live instances. Default: hostname-pid-random.
	Owner string
	// LeaseDuration: a lease whose counter did not move for this long (by the
	// observer's clock) is expired. Default 10s. Renewals run every third of it.
	LeaseDuration time.Duration
	// TakeInterval is how often leases are scanned, taken and balanced. Default LeaseDuration/3.
	TakeInterval time.Duration
	// ShardSyncInterval is how often ListShards looks for new shards. Default LeaseDuration.
	ShardSyncInterval time.Duration
	// PollInterval is the pause after a GetRecords that is caught up. Default 200ms.
	PollInterval time.Duration
	// InitialPosition for shards without a checkpoint and without parents:
	// TrimHorizon (default) or Latest. Child shards always start at TrimHorizon.
	InitialPosition string
	// MaxRecords per GetRecords call (1..10000). Default 1000.
	MaxRecords int32
	// EnhancedFanOut, when set, names a stream consumer to register (once,
	// shared by every instance using the name) and read the shards through
	// with SubscribeToShard instead of polling GetRecords. PollInterval and
	// MaxRecords then do not apply. Empty: polling.
	EnhancedFanOut string
}

// defaultLeaseDuration is ConsumerConfig.LeaseDuration's default.
const defaultLeaseDuration = 10 * time.Second

func (c *ConsumerConfig) setDefaults() error {
	if c.Stream == "" {
		return errors.New("kinesis: ConsumerConfig.Stream is empty: set the stream name")
	}
	if c.LeaseTable == "" {
		return errors.New("kinesis: ConsumerConfig.LeaseTable is empty: name a DynamoDB table for leases")
	}
	if strings.Contains(c.LeaseNamespace, "/") {
		return fmt.Errorf("kinesis: LeaseNamespace %q contains '/': use another name", c.LeaseNamespace)
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = defaultLeaseDuration
	}
	if c.TakeInterval <= 0 {
		c.TakeInterval = c.LeaseDuration / 3
	}
	if c.ShardSyncInterval <= 0 {
		c.ShardSyncInterval = c.LeaseDuration
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	switch c.InitialPosition {
	case "":
		c.InitialPosition = TrimHorizon
	case TrimHorizon, Latest:
	default:
		return fmt.Errorf("kinesis: InitialPosition %q: use %q or %q", c.InitialPosition, TrimHorizon, Latest)
	}
	if c.MaxRecords <= 0 {
		c.MaxRecords = 1000
	}
	if c.MaxRecords > 10000 {
		return fmt.Errorf("kinesis: MaxRecords %d is above the GetRecords limit of 10000", c.MaxRecords)
	}
	if n := c.EnhancedFanOut; n != "" && (len(n) > 128 || strings.IndexFunc(n, notConsumerNameRune) >= 0) {
		return fmt.Errorf("kinesis: EnhancedFanOut consumer name %q: use 1 to 128 letters, digits, '_', '.' or '-'", n)
	}
	return nil
}

func notConsumerNameRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
}

// Consumer reads a stream as one member of a group of instances sharing a
// lease table. Create it with NewConsumer and call Run.
type Consumer struct {
	cfg   ConsumerConfig
	kin   KinesisAPI
	fo    FanOutAPI // nil when polling
	arn   string    // the stream consumer's ARN, set by Run before any shard is read (fan-out)
	table *leaseTable
	h     Handler
	log   *slog.Logger
	clock clock.Clock
	m     *consumerMetrics

	mu   sync.Mutex
	held map[string]*worker
	wg   sync.WaitGroup

	obs     map[string]observation // taker goroutine only
	syncNow chan struct{}

	closedMu sync.Mutex
	closed   map[string]bool // shards the last listing showed closed (fan-out's SHARD_END check)
	listedAt time.Time       // when the last listing began

	abandon   bool // tests: exit like a crash (no release, no Lost)
	maxEvents int  // tests: fan-out subscriptions end after this many events
}

// observation is when this instance first saw a lease at its current counter.
type observation struct {
	counter int64
	owner   string
	seen    time.Time
}

type worker struct {
	shard  Shard
	lease  *Lease
	cancel context.CancelCauseFunc
}

// NewConsumer checks cfg and returns a consumer; nothing runs until Run.
func NewConsumer(kin KinesisAPI, ddb DynamoAPI, cfg ConsumerConfig, h Handler, opts ...Option) (*Consumer, error) {
	if kin == nil || ddb == nil || h == nil {
		return nil, errors.New("kinesis: NewConsumer needs a Kinesis client, a DynamoDB client and a Handler")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var fo FanOutAPI
	if cfg.EnhancedFanOut != "" {
		var ok bool
		if fo, ok = kin.(FanOutAPI); !ok {
			return nil, fmt.Errorf("kinesis: EnhancedFanOut needs a client with SubscribeToShard (a *kinesis.Client), got %T", kin)
		}
	}
	o := buildOptions(opts)
	m, err := newConsumerMetrics(o.reg, cfg.Stream)
	if err != nil {
		return nil, err
	}
	return &Consumer{
		cfg: cfg, kin: kin, fo: fo, h: h, log: o.log.With("stream", cfg.Stream, "owner", cfg.Owner), clock: o.clock, m: m,
		table:   &leaseTable{db: ddb, name: cfg.LeaseTable, duration: cfg.LeaseDuration, clock: o.clock, ns: cfg.LeaseNamespace},
		held:    map[string]*worker{},
		obs:     map[string]observation{},
		syncNow: make(chan struct{}, 1),
		closed:  map[string]bool{},
	}, nil
}

// Owner returns this instance's name in the lease table.
func (c *Consumer) Owner() string { return c.cfg.Owner }

// Held returns the IDs of the shards this instance holds right now.
func (c *Consumer) Held() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.held))
	for id := range c.held {
		ids = append(ids, id)
	}
	return ids
}

// Run creates the lease table (and, with EnhancedFanOut, the stream
// consumer) if needed, then syncs shards, takes, renews and balances leases
// and reads the owned shards until ctx ends. On the way out every shard gets
// Lost and its lease is released so others take it at once. Run returns nil
// after a cancel, or the error that stopped it.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.table.ensure(ctx, 50*time.Millisecond); err != nil {
		return err
	}
	if c.fo != nil {
		arn, err := ensureStreamConsumer(ctx, c.fo, c.cfg.Stream, c.cfg.EnhancedFanOut, c.log)
		if err != nil {
			return err
		}
		c.arn = arn
	}
	if err := c.syncShards(ctx); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	var loops sync.WaitGroup
	loops.Add(1)
	go func() {
		defer loops.Done()
		c.renewLoop(runCtx)
	}()

	take := time.NewTicker(c.cfg.TakeInterval)
	defer take.Stop()
	syncT := time.NewTicker(c.cfg.ShardSyncInterval)
	defer syncT.Stop()
	c.takeRound(runCtx)
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case <-take.C:
			c.takeRound(runCtx)
		case <-syncT.C:
			c.logErr(c.syncShards(runCtx), "shard sync failed")
		case <-c.syncNow:
			c.logErr(c.syncShards(runCtx), "shard sync failed")
			c.takeRound(runCtx)
		}
	}
	stop()
	loops.Wait()
	c.wg.Wait() // workers derive from runCtx: stop() ended them; each gets Lost and releases

	return nil
}

func (c *Consumer) logErr(err error, msg string) {
	if err != nil && !errors.Is(err, context.Canceled) {
		c.log.Warn("kinesis: "+msg, "err", err)
	}
}

// renewLoop renews held leases every LeaseDuration/3 and stops the workers
// of leases that were lost or could not be renewed in time.
func (c *Consumer) renewLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		ws := make([]*worker, 0, len(c.held))
		for _, w := range c.held {
			ws = append(ws, w)
		}
		c.mu.Unlock()
		for _, w := range ws {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseDuration/3)
			err := w.lease.renew(rctx)
			cancel()
			switch {
			case err == nil:
			case errors.Is(err, ErrLeaseLost):
				c.log.Info("kinesis: lease lost", "shard", w.shard.ID)
				c.m.lost.Inc()
				w.cancel(ErrLeaseLost)
			case ctx.Err() != nil:
				return
			case w.lease.expired(c.clock.Now()):
				c.log.Warn("kinesis: lease not renewed in time, giving it up", "shard", w.shard.ID, "err", err)
				c.m.lost.Inc()
				w.cancel(fmt.Errorf("%w: renewal failed: %v", ErrLeaseLost, err))
			default:
				c.log.Warn("kinesis: lease renewal failed, will retry", "shard", w.shard.ID, "err", err)
			}
		}
	}
}

// syncShards lists the stream and creates leases for shards that have none.
// A parent is recorded only if the listing still has it (older ones have
// been trimmed and count as finished).
func (c *Consumer) syncShards(ctx context.Context) error {
	began := c.clock.Now()
	shards, err := listShards(ctx, c.kin, c.cfg.Stream)
	if err != nil {
		return err
	}
	items, err := c.table.scan(ctx)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(items))
	for _, it := range items {
		have[it.ShardID] = true
	}
	listed := make(map[string]bool, len(shards))
	closed := map[string]bool{}
	for _, s := range shards {
		listed[aws.ToString(s.ShardId)] = true
		if s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil {
			closed[aws.ToString(s.ShardId)] = true
		}
	}
	c.closedMu.Lock()
	c.closed, c.listedAt = closed, began
	c.closedMu.Unlock()
	// children links every shard to its children, from the listing and
	// from the leases (a child's lease outlives its parents').
	children := map[string][]string{}
	for _, s := range shards {
		for _, p := range parentsOf(s) {
			children[p] = append(children[p], aws.ToString(s.ShardId))
		}
	}
	leased := make(map[string]leaseItem, len(items))
	for _, it := range items {
		leased[it.ShardID] = it
		for _, p := range it.Parents {
			if !slices.Contains(children[p], it.ShardID) {
				children[p] = append(children[p], it.ShardID)
			}
		}
	}
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if have[id] || hasLeasedDescendant(id, children, leased) {
			continue // a shard whose lease was deleted once its children started is done
		}
		var parents []string
		for _, p := range parentsOf(s) {
			if listed[p] || have[p] {
				parents = append(parents, p)
			}
		}
		cp := c.cfg.InitialPosition
		if len(parents) > 0 {
			cp = TrimHorizon
		}
		if err := c.table.create(ctx, id, parents, cp); err != nil {
			return err
		}
		have[id] = true
	}
	return c.deleteFinishedLeases(ctx, children, leased)
}

// hasLeasedDescendant reports whether a child, grandchild… of id held a
// lease when the sync round began.
func hasLeasedDescendant(id string, children map[string][]string, leased map[string]leaseItem) bool {
	for _, ch := range children[id] {
		if _, ok := leased[ch]; ok || hasLeasedDescendant(ch, children, leased) {
			return true
		}
	}
	return false
}

// deleteFinishedLeases removes the lease of each shard read to its end once
// every child has started (holds a checkpoint past its beginning): no one
// needs it any more — parentsDone counts a missing parent as done, and
// syncShards does not recreate a shard whose descendants hold leases. This is
// the Kinesis Client Library's lease cleanup; without it the table keeps one
// item per shard the stream ever had.
func (c *Consumer) deleteFinishedLeases(ctx context.Context, children map[string][]string, leased map[string]leaseItem) error {
	for id, it := range leased {
		if it.Checkpoint != ShardEnd || len(children[id]) == 0 {
			continue
		}
		started := true
		for _, ch := range children[id] {
			cl, ok := leased[ch]
			started = started && ok && cl.Checkpoint != "" && cl.Checkpoint != TrimHorizon && cl.Checkpoint != Latest
		}
		if !started {
			continue
		}
		if err := c.table.deleteFinished(ctx, id); err != nil {
			return err
		}
		c.log.Info("kinesis: deleted the lease of a finished shard whose children have started", "shard", id, "children", children[id])
	}
	return nil
}

// listed reports whether the last shard listing showed shard open, and how
// long ago that listing began.
func (c *Consumer) listed(shard string) (bool, time.Duration) {
	c.closedMu.Lock()
	defer c.closedMu.Unlock()
	return !c.closed[shard], c.clock.Now().Sub(c.listedAt)
}

// isClosed reports whether the last shard listing showed shard closed.
func (c *Consumer) isClosed(shard string) bool {
	c.closedMu.Lock()
	defer c.closedMu.Unlock()
	return c.closed[shard]
}
