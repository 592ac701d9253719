package kafka

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kandle/kandle/internal/testkit"
)

// withKfakeGroups keeps kfake's own group coordinator: set
// KANDLE_KFAKE_GROUPS=1 to watch TestDevBrokerGroupNeverWedges wedge it.
func withKfakeGroups() DevBrokerOption { return func(c *devBrokerConfig) { c.kfakeGroups = true } }

// The group options of a kandle stage (engine/stage.go): a transactional
// group session, cooperative-sticky, the session timeout users set (here the
// dev broker's minimum, as `kandle run -session-timeout 6s`) and a rebalance
// timeout of session + transaction timeout (10s, the shipped default).
const (
	wedgeSession   = 6 * time.Second
	wedgeRebalance = wedgeSession + 10*time.Second
	wedgeGroup     = "wedge"
	wedgeParts     = 6
)

// killPoint is where in the group protocol a member dies.
type killPoint struct {
	name string
	key  kmsg.Key // the request (write) or response (read) that triggers it
	read bool
	nth  int // the nth such request or response after arming
	// after a request, how long the member lives on: long enough for the
	// request to reach the broker (a response kills at once)
	after time.Duration
}

var killPoints = []killPoint{
	{name: "first JoinGroup sent (before its member ID)", key: kmsg.JoinGroup, nth: 1},
	{name: "JoinGroup with member ID sent (waiting in the join)", key: kmsg.JoinGroup, nth: 2},
	{name: "JoinGroup answered, before SyncGroup", key: kmsg.JoinGroup, read: true, nth: 1},
	{name: "SyncGroup sent (waiting in the sync)", key: kmsg.SyncGroup, nth: 1},
	{name: "first heartbeat after joining", key: kmsg.Heartbeat, nth: 1},
	{name: "transactional offset commit sent", key: kmsg.TxnOffsetCommit, nth: 1},
}

// wedgeMember is one group client behind its own proxy: killing it resets
// its connections and refuses new ones, so it dies without leaving.
type wedgeMember struct {
	name  string
	proxy *testkit.Proxy
	sess  *kgo.GroupTransactSession

	mu     sync.Mutex
	armed  *killPoint
	seen   int
	dying  sync.WaitGroup // a kill on its way (killPoint.after)
	dead   bool
	died   time.Time
	owned  map[int32]bool
	broken []string // failed JoinGroup or SyncGroup reads while alive
}

func (m *wedgeMember) hit(key int16, read bool) {
	m.mu.Lock()
	k := m.armed
	if k == nil || m.dead || kmsg.Key(key) != k.key || read != k.read {
		m.mu.Unlock()
		return
	}
	m.seen++
	fire := m.seen >= k.nth
	if fire {
		m.armed = nil
	}
	m.mu.Unlock()
	switch {
	case !fire:
	case read:
		m.kill()
	default:
		m.dying.Add(1)
		go func() {
			defer m.dying.Done()
			time.Sleep(k.after)
			m.kill()
		}()
	}
}

func (m *wedgeMember) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	m.hit(key, false)
}

func (m *wedgeMember) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	m.hit(key, true)
	if err != nil && (kmsg.Key(key) == kmsg.JoinGroup || kmsg.Key(key) == kmsg.SyncGroup) {
		m.mu.Lock()
		if !m.dead {
			m.broken = append(m.broken, fmt.Sprintf("%s: %v", kmsg.NameForKey(key), err))
		}
		m.mu.Unlock()
	}
}

func (m *wedgeMember) isDead() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead
}

func (m *wedgeMember) kill() {
	m.mu.Lock()
	if m.dead {
		m.mu.Unlock()
		return
	}
	m.dead, m.died, m.armed = true, time.Now(), nil
	m.mu.Unlock()
	m.proxy.Kill()
}

// arm makes the member die at k (a copy), after a random delay for a
// request.
func (m *wedgeMember) arm(r *rand.Rand, k killPoint) {
	k.after = time.Duration(10+r.IntN(200)) * time.Millisecond
	m.mu.Lock()
	m.armed, m.seen = &k, 0
	m.mu.Unlock()
}

// TestDevBrokerGroupNeverWedges kills group members at random points of
// repeated rebalances (during the first join, waiting in a join, between
// JoinGroup and SyncGroup, waiting in a sync, right after joining, in a
// commit), by cutting their connections so they cannot leave, while new
// members join. After every round, every partition must be owned again by
// exactly one live member within one session timeout plus one rebalance
// timeout, and no live member's JoinGroup or SyncGroup may go unanswered.
// KANDLE_SOAK=1 runs 40 rounds; KANDLE_CRASH_SEED repeats a run's choices.
// KANDLE_KFAKE_GROUPS=1 runs it against kfake's own group coordinator, which
// it wedges within a few rounds (a rebalance held open by a member that
// died in its first join, the live members' JoinGroups unanswered).
func TestDevBrokerGroupNeverWedges(t *testing.T) {
	t.Parallel()
	rounds := 6
	if os.Getenv("KANDLE_SOAK") == "1" {
		rounds = 40
	}
	opts := []DevBrokerOption{WithSeedTopics(wedgeParts, "wedge-in"), WithSeedTopics(1, "wedge-out")}
	if os.Getenv("KANDLE_KFAKE_GROUPS") == "1" {
		opts = append(opts, withKfakeGroups())
	}
	b := startBroker(t, opts...)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KANDLE_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("random seed %d (KANDLE_CRASH_SEED=%d repeats it)", seed, seed)
	r := rand.New(rand.NewPCG(seed, seed>>1|1))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup // every goroutine of the test
	defer wg.Wait()
	defer cancel()
	admin := newClient(t, b.Addrs())
	adm := kadm.NewClient(admin)

	// Input keeps flowing so that members are in transactions when they die.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			admin.Produce(ctx, &kgo.Record{Topic: "wedge-in", Partition: int32(i % wedgeParts), Value: []byte(strconv.Itoa(i))}, nil)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	var members []*wedgeMember
	named := 0
	start := func(k *killPoint) *wedgeMember {
		named++
		m := &wedgeMember{name: fmt.Sprintf("m%d", named), proxy: testkit.StartKafkaProxy(t, b.Addrs()[0]), owned: map[int32]bool{}}
		if k != nil {
			m.arm(r, *k)
		}
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(m.proxy.Addr()),
			kgo.ClientID(m.name),
			kgo.ConsumerGroup(wedgeGroup),
			kgo.ConsumeTopics("wedge-in"),
			kgo.TransactionalID("wedge."+m.name),
			kgo.TransactionTimeout(10*time.Second),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequireStableFetchOffsets(),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(wedgeSession),
			kgo.RebalanceTimeout(wedgeRebalance),
			kgo.ProducerLinger(0),
			kgo.WithHooks(m),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				m.mu.Lock()
				for _, p := range a["wedge-in"] {
					m.owned[p] = true
				}
				m.mu.Unlock()
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.disown(a["wedge-in"]) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { m.disown(a["wedge-in"]) }),
		)
		if err != nil {
			t.Fatal(err)
		}
		m.sess = sess
		members = append(members, m)
		wg.Add(1)
		go func() { // the member's poll loop, as a stage's; ends when the session is closed
			defer wg.Done()
			for {
				fs := sess.PollFetches(ctx)
				if fs.IsClientClosed() || ctx.Err() != nil {
					return
				}
				if fs.NumRecords() == 0 || m.isDead() {
					continue
				}
				if err := sess.Begin(); err != nil {
					_, _ = sess.End(ctx, kgo.TryAbort)
					continue
				}
				fs.EachRecord(func(rec *kgo.Record) {
					sess.Produce(ctx, &kgo.Record{Topic: "wedge-out", Value: rec.Value}, nil)
				})
				_, _ = sess.End(ctx, kgo.TryCommit)
			}
		}()
		return m
	}
	// A dead member's client is closed in the background: its LeaveGroup
	// cannot get through, which is the point.
	bury := func(m *wedgeMember) {
		sess := m.sess
		wg.Add(1)
		go func() { defer wg.Done(); sess.Close() }()
	}
	defer func() {
		for _, m := range members {
			if !m.isDead() && m.sess != nil {
				m.sess.Close()
			}
		}
	}()

	live := func() []*wedgeMember {
		var out []*wedgeMember
		for _, m := range members {
			if !m.isDead() {
				out = append(out, m)
			}
		}
		return out
	}

	for range 3 {
		start(nil)
	}
	if d, err := waitOwned(ctx, adm, live, 60*time.Second); err != nil {
		t.Fatalf("the first three members never settled in %s: %v", d, err)
	}
	bound := wedgeSession + wedgeRebalance + 5*time.Second
	var worst time.Duration
	for round := 1; round <= rounds; round++ {
		roundStart := time.Now()
		// Newcomers, some of which die in their first join; members to
		// kill, each at a random point of the coming rebalance.
		var plan []string
		if round%2 == 1 && len(live()) >= 2 {
			// A member dies and a newcomer dies waiting in its first
			// join: the rebalance that drops the first hands its free
			// partitions to the second.
			v := live()[r.IntN(len(live()))]
			v.kill()
			m := start(&killPoints[1])
			plan = append(plan, v.name+" dies now", m.name+" (new) dies at: "+killPoints[1].name)
		}
		for range 1 + r.IntN(2) {
			var k *killPoint
			if r.IntN(3) == 0 {
				k = &killPoints[r.IntN(2)]
			}
			m := start(k)
			if k != nil {
				plan = append(plan, m.name+" (new) dies at: "+k.name)
			} else {
				plan = append(plan, m.name+" joins")
			}
		}
		var victims []*wedgeMember
		for _, m := range live() {
			m.mu.Lock()
			if m.armed == nil {
				victims = append(victims, m)
			}
			m.mu.Unlock()
		}
		r.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
		for _, m := range victims[:max(0, min(len(victims)-2, 1+r.IntN(2)))] {
			k := killPoints[2+r.IntN(len(killPoints)-2)]
			if r.IntN(4) == 0 {
				plan = append(plan, m.name+" dies now")
				m.kill()
				continue
			}
			m.arm(r, k)
			plan = append(plan, m.name+" dies at: "+k.name)
		}
		t.Logf("round %d: %s", round, strings.Join(plan, "; "))
		// Armed points that the protocol never reaches fire after a while.
		time.Sleep(time.Duration(2000+r.IntN(3000)) * time.Millisecond)
		for _, m := range members {
			m.mu.Lock()
			pending := m.armed != nil && !m.dead
			m.mu.Unlock()
			if pending {
				m.kill()
			}
			m.dying.Wait()
		}
		for _, m := range members {
			if m.isDead() && m.sess != nil {
				bury(m)
				m.sess = nil
			}
		}
		for len(live()) < 2 {
			start(nil)
		}
		// The clock runs from the last death (or the round's start).
		last := roundStart
		for _, m := range members {
			m.mu.Lock()
			if m.died.After(last) {
				last = m.died
			}
			m.mu.Unlock()
		}
		_, err := waitOwned(ctx, adm, live, bound-time.Since(last))
		d := time.Since(last)
		if err != nil {
			if f, ferr := os.Create("/tmp/h19b_goroutines.txt"); ferr == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 2)
				f.Close()
			}
			t.Fatalf("round %d: partitions not owned by the live members within %s (session %s + rebalance %s + 5s): %v",
				round, d.Round(time.Millisecond), wedgeSession, wedgeRebalance, err)
		}
		worst = max(worst, d)
		t.Logf("round %d: every partition owned by the %d live members after %s", round, len(live()), d.Round(time.Millisecond))
	}
	for _, m := range members {
		m.mu.Lock()
		if !m.dead && len(m.broken) > 0 {
			t.Errorf("live member %s had group requests go unanswered: %v", m.name, m.broken)
		}
		m.mu.Unlock()
	}
	t.Logf("%d rounds; slowest recovery %s (bound %s)", rounds, worst.Round(time.Millisecond), bound)
}

func (m *wedgeMember) disown(ps []int32) {
	m.mu.Lock()
	for _, p := range ps {
		delete(m.owned, p)
	}
	m.mu.Unlock()
}

// waitOwned waits until the group is stable with exactly the live members,
// the broker's assignment gives every partition to one of them, and each
// member was handed (by its callbacks) what it is assigned. It returns how
// long that took.
//
// A member may still list a partition it gave up: kgo's transact session
// drops a revoke callback that comes while an earlier revoke waits for the
// session's next End, and a member with nothing to commit does not call
// End. The broker's assignment, checked for overlaps, is the authority.
func waitOwned(ctx context.Context, adm *kadm.Client, live func() []*wedgeMember, within time.Duration) (time.Duration, error) {
	start := time.Now()
	var why string
	for time.Since(start) < within {
		why = ownedProblem(ctx, adm, live())
		if why == "" {
			return time.Since(start), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), fmt.Errorf("%s", why)
}

func ownedProblem(ctx context.Context, adm *kadm.Client, live []*wedgeMember) string {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dg, err := adm.DescribeGroups(dctx, wedgeGroup)
	if err != nil {
		return "describe: " + err.Error()
	}
	g := dg[wedgeGroup]
	byID := map[string]*wedgeMember{}
	var ids []string
	for _, m := range live {
		id, _ := m.sess.Client().GroupMetadata()
		byID[id] = m
		ids = append(ids, m.name+"="+id)
	}
	var desc []string
	owner := map[int32]string{}
	problem := ""
	for _, gm := range g.Members {
		m := byID[gm.MemberID]
		var assigned []int32
		if a, ok := gm.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				assigned = append(assigned, tp.Partitions...)
			}
		}
		sort.Slice(assigned, func(i, j int) bool { return assigned[i] < assigned[j] })
		desc = append(desc, fmt.Sprintf("%s %v", gm.MemberID, assigned))
		if m == nil {
			problem = cmp.Or(problem, "a dead member is still in the group: "+gm.MemberID)
			continue
		}
		m.mu.Lock()
		var owned []int32
		for p := range m.owned {
			owned = append(owned, p)
		}
		m.mu.Unlock()
		sort.Slice(owned, func(i, j int) bool { return owned[i] < owned[j] })
		for _, p := range assigned {
			if !slices.Contains(owned, p) {
				problem = cmp.Or(problem, fmt.Sprintf("%s owns %v, assigned %v", m.name, owned, assigned))
				break
			}
		}
		for _, p := range assigned {
			if o, dup := owner[p]; dup {
				problem = cmp.Or(problem, fmt.Sprintf("partition %d assigned to %s and %s", p, o, m.name))
			}
			owner[p] = m.name
		}
	}
	switch {
	case g.State != "Stable":
		problem = "group is " + g.State
	case len(g.Members) != len(live):
		problem = cmp.Or(problem, fmt.Sprintf("%d members, %d live", len(g.Members), len(live)))
	case len(owner) != wedgeParts:
		problem = cmp.Or(problem, fmt.Sprintf("%d of %d partitions assigned", len(owner), wedgeParts))
	}
	if problem == "" {
		return ""
	}
	return fmt.Sprintf("%s (group %s: %s; live %s)", problem, g.State, strings.Join(desc, ", "), strings.Join(ids, ", "))
}

// A member that dies waiting in its very first join, while the group is
// still settling in (as an instance restarted after a crash does), is
// removed and its partitions go to the live members within a session
// timeout plus a rebalance timeout. With kfake's own coordinator
// (KANDLE_KFAKE_GROUPS=1) this fails: the dead member, which has no session
// timer there, holds the rebalance open; the live members waiting in it are
// expired without an answer, and the group ends up empty while they still
// wait for their JoinGroup.
func TestDevBrokerExpiresMemberDeadInFirstJoin(t *testing.T) {
	t.Parallel()
	opts := []DevBrokerOption{WithSeedTopics(wedgeParts, "first-join-in")}
	if os.Getenv("KANDLE_KFAKE_GROUPS") == "1" {
		opts = append(opts, withKfakeGroups())
	}
	expireMemberDeadInFirstJoin(t, opts)
}

// The same on a dev broker with SASL users, whose members log in.
func TestDevBrokerSASLExpiresMemberDeadInFirstJoin(t *testing.T) {
	t.Parallel()
	expireMemberDeadInFirstJoin(t, []DevBrokerOption{WithSeedTopics(wedgeParts, "first-join-in"), WithSASLUser("alice", "wonder land")},
		kgo.SASL(scram.Auth{User: "alice", Pass: "wonder land"}.AsSha512Mechanism()))
}

// expireMemberDeadInFirstJoin runs the first-join test on a broker started
// with opts, every client with clientOpts.
func expireMemberDeadInFirstJoin(t *testing.T, opts []DevBrokerOption, clientOpts ...kgo.Opt) {
	b := startBroker(t, opts...)
	adm := kadm.NewClient(newClient(t, b.Addrs(), clientOpts...))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	member := func(name string, k *killPoint) *wedgeMember {
		m := &wedgeMember{name: name, proxy: testkit.StartKafkaProxy(t, b.Addrs()[0]), owned: map[int32]bool{}, armed: k}
		s, err := kgo.NewGroupTransactSession(append([]kgo.Opt{kgo.SeedBrokers(m.proxy.Addr()), kgo.ClientID(name),
			kgo.ConsumerGroup(wedgeGroup), kgo.ConsumeTopics("first-join-in"), kgo.TransactionalID(name),
			kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(wedgeSession), kgo.RebalanceTimeout(wedgeRebalance),
			kgo.WithHooks(m)}, clientOpts...)...)
		if err != nil {
			t.Fatal(err)
		}
		m.sess = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !s.PollFetches(ctx).IsClientClosed() && ctx.Err() == nil {
			}
		}()
		return m
	}
	a, c := member("a", nil), member("b", nil)
	defer a.sess.Close()
	defer c.sess.Close()
	time.Sleep(8 * time.Second)
	k := killPoints[1]
	k.after = 100 * time.Millisecond
	d := member("d", &k)
	for !d.isDead() {
		time.Sleep(10 * time.Millisecond)
	}
	died := time.Now()
	d.dying.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); d.sess.Close() }()
	ids := map[string]bool{}
	for _, m := range []*wedgeMember{a, c} {
		id, _ := m.sess.Client().GroupMetadata()
		ids[id] = true
	}
	bound := wedgeSession + wedgeRebalance + 5*time.Second
	// Settled: stable, a and b the only members, every partition assigned
	// once. Seen twice a second apart, so that the rebalance d started has
	// surely begun.
	settled := 0
	for settled < 2 {
		if time.Since(died) > bound {
			t.Fatalf("d died in its first join %s ago and the group has not settled without it", bound)
		}
		time.Sleep(time.Second)
		dg, err := adm.DescribeGroups(ctx, wedgeGroup)
		if err != nil {
			continue
		}
		g := dg[wedgeGroup]
		ok := g.State == "Stable" && len(g.Members) == 2
		n := 0
		for _, m := range g.Members {
			ok = ok && ids[m.MemberID]
			if as, isC := m.Assigned.AsConsumer(); isC {
				for _, tp := range as.Topics {
					n += len(tp.Partitions)
				}
			}
		}
		if ok && n == wedgeParts {
			settled++
		} else {
			settled = 0
			t.Logf("%5.1fs: group %s, %d members, %d partitions assigned", time.Since(died).Seconds(), g.State, len(g.Members), n)
		}
	}
	t.Logf("d died in its first join; a and b own every partition %s later", time.Since(died).Round(time.Millisecond))
}
