package kafka

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupCoordinator answers the classic consumer group protocol (JoinGroup,
// SyncGroup, Heartbeat, LeaveGroup, DescribeGroups) for the dev broker in
// place of kfake's own coordinator, and checks the member and generation of
// offset commits before kfake stores them.
//
// It exists because kfake's coordinator can wedge a group when members die
// during a rebalance: a member parked in JoinGroup or SyncGroup is expired
// by its session timer without an answer, every join restarts the rebalance
// deadline (so a stream of joins and expiries postpones it forever), and a
// member that dies during its first join never gets a session timer at all,
// so it keeps its partitions for good. Here, as in Kafka:
//
//   - a member waiting in JoinGroup or SyncGroup is alive; every other member
//     is removed once it has been silent for its session timeout;
//   - a rebalance ends when every member has rejoined, or at the deadline set
//     when it began (the members' longest rebalance timeout), which later
//     joins do not move; members that did not rejoin by then are removed;
//   - after the join phase, members that have not sent SyncGroup within the
//     rebalance timeout are removed and the group rebalances again;
//   - a removed member's waiting request is answered (UNKNOWN_MEMBER_ID), so
//     every JoinGroup and SyncGroup gets an answer;
//   - a static member (group instance id) that restarts into a stable group
//     whose protocol it still offers takes its old place and assignment
//     without a rebalance, and the old member is fenced.
//
// Offsets stay in kfake: a commit that passes the checks here reaches kfake
// as a simple (memberless) commit, which it stores as usual.
//
// Group requests are served by kfake control functions, which run before
// kfake's SASL check: a broker with SASL users listens through saslGate
// (saslgate.go), which closes a connection that sends a request before its
// login succeeded, so an unauthenticated client reaches no group.
type groupCoordinator struct {
	c          *kfake.Cluster
	log        *slog.Logger
	minSession time.Duration
	maxSession time.Duration
	// ensure makes kfake create group (an empty simple offset commit);
	// it runs while the joining request sleeps.
	ensure func(group string)

	mu     sync.Mutex
	groups map[string]*devGroup

	stop chan struct{}
	done chan struct{}
}

type devGroupState int8

const (
	groupEmpty devGroupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

func (s devGroupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}[s]
}

type devGroup struct {
	name       string
	state      devGroupState
	generation int32

	protocolType string
	protocol     string
	leader       string

	members map[string]*devMember
	pending map[string]time.Time // member IDs handed out with MEMBER_ID_REQUIRED, until when they may join
	static  map[string]string    // instance ID -> member ID

	joinDeadline time.Time // when the join phase of the rebalance ends
	syncDeadline time.Time // when members that have not synced are removed
	notSynced    map[string]bool
}

type devMember struct {
	id         string
	instanceID *string
	session    time.Duration
	rebalance  time.Duration
	protocols  []kmsg.JoinGroupRequestProtocol
	assignment []byte
	expires    time.Time // session deadline, while the member is not waiting

	join     *kmsg.JoinGroupRequest // the waiting JoinGroup, if any
	joinWait *parkedReply
	sync     *kmsg.SyncGroupRequest
	syncWait *parkedReply
}

// parkedReply is a request answered later: the control function serving it
// sleeps (kfake.Cluster.SleepControl) until answer is called.
type parkedReply struct {
	once sync.Once
	done chan struct{}
	resp kmsg.Response
}

func newParked() *parkedReply { return &parkedReply{done: make(chan struct{})} }

func (p *parkedReply) answer(r kmsg.Response) {
	p.once.Do(func() { p.resp = r; close(p.done) })
}

// coordinatorTick is how often deadlines are checked.
const coordinatorTick = 100 * time.Millisecond

func newGroupCoordinator(c *kfake.Cluster, log *slog.Logger, minSession, maxSession time.Duration, ensure func(string)) *groupCoordinator {
	gc := &groupCoordinator{c: c, log: log, minSession: minSession, maxSession: maxSession, ensure: ensure,
		groups: map[string]*devGroup{}, stop: make(chan struct{}), done: make(chan struct{})}
	gc.install()
	go gc.reap()
	return gc
}

// close stops the deadline loop and answers every waiting request (the
// broker is going away). It must run before the cluster closes.
func (gc *groupCoordinator) close() {
	select {
	case <-gc.stop:
		return
	default:
	}
	close(gc.stop)
	<-gc.done
}

func (gc *groupCoordinator) install() {
	serve := func(key kmsg.Key, fn func(kmsg.Request) (kmsg.Response, *parkedReply, bool)) {
		gc.c.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			gc.c.KeepControl()
			resp, p, handled := fn(r)
			if !handled {
				return nil, nil, false
			}
			if p != nil {
				resp = gc.wait(p)
				if resp == nil {
					return nil, errors.New("dev broker closing"), true
				}
			}
			return resp, nil, true
		})
	}
	serve(kmsg.JoinGroup, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		req := r.(*kmsg.JoinGroupRequest)
		if req.Group != "" && gc.ensure != nil {
			// kfake answers OffsetFetch for a group it has never seen
			// with GROUP_ID_NOT_FOUND: have it know the group first.
			gc.c.SleepControl(func() { gc.ensure(req.Group) })
		}
		resp, p := gc.join(req)
		return resp, p, true
	})
	serve(kmsg.SyncGroup, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		resp, p := gc.syncGroup(r.(*kmsg.SyncGroupRequest))
		return resp, p, true
	})
	serve(kmsg.Heartbeat, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		return gc.heartbeat(r.(*kmsg.HeartbeatRequest)), nil, true
	})
	serve(kmsg.LeaveGroup, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		return gc.leave(r.(*kmsg.LeaveGroupRequest)), nil, true
	})
	serve(kmsg.DescribeGroups, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		resp := gc.describe(r.(*kmsg.DescribeGroupsRequest))
		return resp, nil, resp != nil
	})
	serve(kmsg.OffsetCommit, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		resp := gc.offsetCommit(r.(*kmsg.OffsetCommitRequest))
		return resp, nil, resp != nil
	})
	serve(kmsg.TxnOffsetCommit, func(r kmsg.Request) (kmsg.Response, *parkedReply, bool) {
		resp := gc.txnOffsetCommit(r.(*kmsg.TxnOffsetCommitRequest))
		return resp, nil, resp != nil
	})
}

// wait sleeps the calling control function until p is answered; nil means
// the broker is closing.
func (gc *groupCoordinator) wait(p *parkedReply) kmsg.Response {
	select {
	case <-p.done:
		return p.resp
	default:
	}
	gc.c.SleepControl(func() {
		select {
		case <-p.done:
		case <-gc.stop:
		}
	})
	select {
	case <-p.done:
		return p.resp
	default:
		return nil
	}
}

// reap enforces session, join and sync deadlines until close.
func (gc *groupCoordinator) reap() {
	defer close(gc.done)
	t := time.NewTicker(coordinatorTick)
	defer t.Stop()
	for {
		select {
		case <-gc.stop:
			gc.mu.Lock()
			for _, g := range gc.groups {
				for _, m := range g.members {
					gc.answerWaiting(m, kerr.CoordinatorNotAvailable.Code)
				}
			}
			gc.mu.Unlock()
			return
		case now := <-t.C:
			gc.mu.Lock()
			for _, g := range gc.groups {
				gc.expire(g, now)
			}
			gc.mu.Unlock()
		}
	}
}

// expire applies every deadline of g that has passed at now.
func (gc *groupCoordinator) expire(g *devGroup, now time.Time) {
	for id, until := range g.pending {
		if now.After(until) {
			delete(g.pending, id)
		}
	}
	var gone []string
	for _, m := range g.members {
		if m.joinWait == nil && m.syncWait == nil && now.After(m.expires) {
			gone = append(gone, m.id)
		}
	}
	for _, id := range gone {
		gc.log.Warn("dev broker: group member's session expired; rebalancing", "group", g.name, "member", id)
		gc.removeMember(g, g.members[id])
	}
	if len(gone) > 0 {
		gc.prepareRebalance(g, now)
	}
	switch g.state {
	case groupPreparing:
		if !now.Before(g.joinDeadline) {
			gc.completeJoin(g, now)
		} else {
			gc.tryCompleteJoin(g, now)
		}
	case groupCompleting:
		if !now.Before(g.syncDeadline) {
			var late []string
			for id := range g.notSynced {
				if m := g.members[id]; m != nil && m.syncWait == nil {
					late = append(late, id)
				}
			}
			for _, id := range late {
				gc.log.Warn("dev broker: group member did not sync in time; rebalancing", "group", g.name, "member", id)
				gc.removeMember(g, g.members[id])
			}
			gc.prepareRebalance(g, now)
		}
	}
}

func newMemberID(instanceID *string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	prefix := "member"
	if instanceID != nil {
		prefix = *instanceID
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

func (gc *groupCoordinator) group(name string) *devGroup {
	g := gc.groups[name]
	if g == nil {
		g = &devGroup{name: name, members: map[string]*devMember{}, pending: map[string]time.Time{}, static: map[string]string{}}
		gc.groups[name] = g
	}
	return g
}

func (gc *groupCoordinator) join(req *kmsg.JoinGroupRequest) (kmsg.Response, *parkedReply) {
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	resp.MemberID = req.MemberID
	fail := func(e *kerr.Error) (kmsg.Response, *parkedReply) {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	if req.Group == "" {
		return fail(kerr.InvalidGroupID)
	}
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	if session < gc.minSession || session > gc.maxSession {
		return fail(kerr.InvalidSessionTimeout)
	}
	rebalance := time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	if req.Version == 0 || rebalance <= 0 {
		rebalance = session
	}
	if req.ProtocolType == "" || len(req.Protocols) == 0 {
		return fail(kerr.InconsistentGroupProtocol)
	}

	gc.mu.Lock()
	defer gc.mu.Unlock()
	now := time.Now()
	g := gc.group(req.Group)
	if !g.accepts(req) {
		return fail(kerr.InconsistentGroupProtocol)
	}
	m := g.members[req.MemberID]
	switch {
	case req.MemberID == "" && req.InstanceID != nil:
		if old := g.members[g.static[*req.InstanceID]]; old != nil && g.state == groupStable && protocolsOffer(req.Protocols, g.protocol) {
			// A static member restarting into a stable group that still
			// runs a protocol it offers: as in Kafka, it takes the old
			// member's place and assignment without a rebalance (the
			// old one is fenced). A leader skips the assignment.
			gc.answerWaiting(old, kerr.FencedInstanceID.Code)
			delete(g.members, old.id)
			m = &devMember{id: newMemberID(req.InstanceID), instanceID: req.InstanceID, assignment: old.assignment,
				session: session, rebalance: rebalance, protocols: req.Protocols, expires: now.Add(session)}
			g.static[*req.InstanceID] = m.id
			g.members[m.id] = m
			if g.leader == old.id {
				g.leader = m.id
			}
			g.fillJoin(m, resp)
			resp.SkipAssignment = m.id == g.leader
			return resp, nil
		}
		if old := g.members[g.static[*req.InstanceID]]; old != nil {
			// A static member restarting: the new one replaces and
			// fences the old.
			gc.answerWaiting(old, kerr.FencedInstanceID.Code)
			gc.removeMember(g, old)
		}
		m = &devMember{id: newMemberID(req.InstanceID), instanceID: req.InstanceID}
		g.static[*req.InstanceID] = m.id
		g.members[m.id] = m
	case req.MemberID == "" && req.Version >= 4:
		// KIP-394: hand out the member ID first; the member joins
		// with it. Until it does (or its session passes) the
		// rebalance waits for it.
		id := newMemberID(nil)
		g.pending[id] = now.Add(session)
		resp.MemberID = id
		return fail(kerr.MemberIDRequired)
	case req.MemberID == "":
		m = &devMember{id: newMemberID(nil)}
		g.members[m.id] = m
	case m == nil:
		if _, ok := g.pending[req.MemberID]; !ok {
			return fail(kerr.UnknownMemberID)
		}
		delete(g.pending, req.MemberID)
		m = &devMember{id: req.MemberID}
		g.members[m.id] = m
	default:
		if e := g.checkInstance(req.InstanceID, req.MemberID); e != nil {
			return fail(e)
		}
		if g.state != groupPreparing && m.sameProtocols(req.Protocols) && (g.state == groupCompleting || g.leader != m.id) {
			// Nothing changes: answer with the current generation.
			m.session, m.rebalance = session, rebalance
			m.expires = now.Add(session)
			g.fillJoin(m, resp)
			return resp, nil
		}
	}
	if m.joinWait != nil {
		// The member's earlier JoinGroup (a client that timed out and
		// retried) is superseded.
		m.joinWait.answer(gc.joinError(m.join, m.id, kerr.RebalanceInProgress.Code))
	}
	m.session, m.rebalance, m.protocols = session, rebalance, req.Protocols
	m.join, m.joinWait = req, newParked()
	if len(g.members) == 1 {
		g.protocolType = req.ProtocolType
	}
	p := m.joinWait
	gc.prepareRebalance(g, now)
	gc.tryCompleteJoin(g, now)
	return nil, p
}

func (g *devGroup) accepts(req *kmsg.JoinGroupRequest) bool {
	others := 0
	for _, m := range g.members {
		if m.id != req.MemberID {
			others++
		}
	}
	if others == 0 {
		return true
	}
	if req.ProtocolType != g.protocolType {
		return false
	}
	for _, p := range req.Protocols {
		all := true
		for _, m := range g.members {
			if m.id != req.MemberID && !m.supports(p.Name) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// protocolsOffer reports whether a joining member offers protocol name.
func protocolsOffer(ps []kmsg.JoinGroupRequestProtocol, name string) bool {
	return slices.ContainsFunc(ps, func(p kmsg.JoinGroupRequestProtocol) bool { return p.Name == name })
}

func (m *devMember) supports(name string) bool {
	return protocolsOffer(m.protocols, name)
}

func (m *devMember) sameProtocols(ps []kmsg.JoinGroupRequestProtocol) bool {
	return slices.EqualFunc(m.protocols, ps, func(a, b kmsg.JoinGroupRequestProtocol) bool {
		return a.Name == b.Name && string(a.Metadata) == string(b.Metadata)
	})
}

func (g *devGroup) checkInstance(instanceID *string, memberID string) *kerr.Error {
	if instanceID == nil {
		return nil
	}
	known, ok := g.static[*instanceID]
	if !ok {
		return kerr.UnknownMemberID
	}
	if known != memberID {
		return kerr.FencedInstanceID
	}
	return nil
}

// prepareRebalance starts a rebalance unless one is already in its join
// phase: waiting syncs are told to rejoin and the join deadline is set once,
// from the members' longest rebalance timeout.
func (gc *groupCoordinator) prepareRebalance(g *devGroup, now time.Time) {
	if g.state == groupPreparing {
		return
	}
	for _, m := range g.members {
		if m.syncWait != nil {
			r := m.sync.ResponseKind().(*kmsg.SyncGroupResponse)
			r.ErrorCode = kerr.RebalanceInProgress.Code
			m.syncWait.answer(r)
			m.sync, m.syncWait = nil, nil
			m.expires = now.Add(m.session)
		}
	}
	g.notSynced = nil
	var longest time.Duration
	for _, m := range g.members {
		longest = max(longest, m.rebalance)
	}
	g.state = groupPreparing
	g.joinDeadline = now.Add(longest)
}

// tryCompleteJoin ends the join phase early once every member (and every
// member ID handed out) has joined.
func (gc *groupCoordinator) tryCompleteJoin(g *devGroup, now time.Time) {
	if g.state != groupPreparing || len(g.pending) > 0 {
		return
	}
	for _, m := range g.members {
		if m.joinWait == nil {
			return
		}
	}
	gc.completeJoin(g, now)
}

// completeJoin ends the join phase: members that did not rejoin are removed,
// the generation advances and every joined member gets its answer; the
// leader gets the members' metadata to assign.
func (gc *groupCoordinator) completeJoin(g *devGroup, now time.Time) {
	for _, m := range g.members {
		if m.joinWait == nil {
			gc.log.Warn("dev broker: group member did not rejoin within the rebalance timeout; removing it", "group", g.name, "member", m.id)
			gc.removeMember(g, m)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader, g.protocolType = groupEmpty, "", "", ""
		return
	}
	g.protocol = g.vote()
	if g.members[g.leader] == nil {
		g.leader = ""
		for _, id := range g.memberIDs() {
			g.leader = id
			break
		}
	}
	g.state = groupCompleting
	g.syncDeadline = time.Time{}
	g.notSynced = map[string]bool{}
	for _, m := range g.members {
		m.assignment = nil
		g.notSynced[m.id] = true
		g.syncDeadline = later(g.syncDeadline, now.Add(m.rebalance))
		resp := m.join.ResponseKind().(*kmsg.JoinGroupResponse)
		g.fillJoin(m, resp)
		m.joinWait.answer(resp)
		m.join, m.joinWait = nil, nil
		m.expires = now.Add(m.session)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (g *devGroup) memberIDs() []string {
	return slices.Sorted(maps.Keys(g.members))
}

// vote picks the protocol every member supports that most members prefer.
func (g *devGroup) vote() string {
	votes := map[string]int{}
	var order []string
	for _, id := range g.memberIDs() {
		for _, p := range g.members[id].protocols {
			if g.supportedByAll(p.Name) {
				if votes[p.Name] == 0 {
					order = append(order, p.Name)
				}
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, name := range order {
		if votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func (g *devGroup) supportedByAll(name string) bool {
	for _, m := range g.members {
		if !m.supports(name) {
			return false
		}
	}
	return true
}

func (g *devGroup) fillJoin(m *devMember, resp *kmsg.JoinGroupResponse) {
	resp.ErrorCode = 0
	resp.Generation = g.generation
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	resp.Members = nil
	if m.id != g.leader {
		return
	}
	for _, id := range g.memberIDs() {
		o := g.members[id]
		for _, p := range o.protocols {
			if p.Name == g.protocol {
				resp.Members = append(resp.Members, kmsg.JoinGroupResponseMember{MemberID: o.id, InstanceID: o.instanceID, ProtocolMetadata: p.Metadata})
				break
			}
		}
	}
}

func (gc *groupCoordinator) joinError(req *kmsg.JoinGroupRequest, memberID string, code int16) kmsg.Response {
	r := req.ResponseKind().(*kmsg.JoinGroupResponse)
	r.ErrorCode, r.Generation, r.MemberID = code, -1, memberID
	return r
}

// answerWaiting answers the member's waiting JoinGroup or SyncGroup with
// code.
func (gc *groupCoordinator) answerWaiting(m *devMember, code int16) {
	if m.joinWait != nil {
		m.joinWait.answer(gc.joinError(m.join, m.id, code))
		m.join, m.joinWait = nil, nil
	}
	if m.syncWait != nil {
		r := m.sync.ResponseKind().(*kmsg.SyncGroupResponse)
		r.ErrorCode = code
		m.syncWait.answer(r)
		m.sync, m.syncWait = nil, nil
	}
}

// removeMember drops m, answering what it waits for with UNKNOWN_MEMBER_ID.
// The caller rebalances.
func (gc *groupCoordinator) removeMember(g *devGroup, m *devMember) {
	gc.answerWaiting(m, kerr.UnknownMemberID.Code)
	delete(g.members, m.id)
	delete(g.notSynced, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
	}
}

func (gc *groupCoordinator) syncGroup(req *kmsg.SyncGroupRequest) (kmsg.Response, *parkedReply) {
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(e *kerr.Error) (kmsg.Response, *parkedReply) {
		resp.ErrorCode = e.Code
		return resp, nil
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	now := time.Now()
	g := gc.groups[req.Group]
	if g == nil {
		return fail(kerr.UnknownMemberID)
	}
	if e := g.checkInstance(req.InstanceID, req.MemberID); e != nil {
		return fail(e)
	}
	m := g.members[req.MemberID]
	switch {
	case m == nil:
		return fail(kerr.UnknownMemberID)
	case req.Generation != g.generation:
		return fail(kerr.IllegalGeneration)
	case req.ProtocolType != nil && *req.ProtocolType != g.protocolType,
		req.Protocol != nil && *req.Protocol != g.protocol:
		return fail(kerr.InconsistentGroupProtocol)
	}
	m.expires = now.Add(m.session)
	switch g.state {
	case groupPreparing:
		return fail(kerr.RebalanceInProgress)
	case groupStable:
		g.fillSync(m, resp)
		return resp, nil
	case groupCompleting:
	default:
		return fail(kerr.UnknownMemberID)
	}
	delete(g.notSynced, m.id)
	if m.syncWait != nil {
		r := m.sync.ResponseKind().(*kmsg.SyncGroupResponse)
		r.ErrorCode = kerr.RebalanceInProgress.Code
		m.syncWait.answer(r)
	}
	m.sync, m.syncWait = req, newParked()
	p := m.syncWait
	if m.id == g.leader {
		for _, a := range req.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil {
				o.assignment = a.MemberAssignment
			}
		}
		g.state = groupStable
		g.notSynced = nil
		for _, o := range g.members {
			if o.syncWait != nil {
				r := o.sync.ResponseKind().(*kmsg.SyncGroupResponse)
				g.fillSync(o, r)
				o.syncWait.answer(r)
				o.sync, o.syncWait = nil, nil
				o.expires = now.Add(o.session)
			}
		}
	}
	return nil, p
}

// emptyConsumerAssignment is an encoded empty consumer assignment: what a
// "consumer" group member the leader assigned nothing gets, as some clients
// cannot decode zero bytes.
var emptyConsumerAssignment = new(kmsg.ConsumerMemberAssignment).AppendTo(nil)

func (g *devGroup) fillSync(m *devMember, resp *kmsg.SyncGroupResponse) {
	resp.ProtocolType = kmsg.StringPtr(g.protocolType)
	resp.Protocol = kmsg.StringPtr(g.protocol)
	resp.MemberAssignment = m.assignment
	if len(m.assignment) == 0 && g.protocolType == "consumer" {
		resp.MemberAssignment = emptyConsumerAssignment
	}
}

func (gc *groupCoordinator) heartbeat(req *kmsg.HeartbeatRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	gc.mu.Lock()
	defer gc.mu.Unlock()
	g := gc.groups[req.Group]
	if g == nil {
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp
	}
	if e := g.checkInstance(req.InstanceID, req.MemberID); e != nil {
		resp.ErrorCode = e.Code
		return resp
	}
	m := g.members[req.MemberID]
	switch {
	case m == nil:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case req.Generation != g.generation && g.state != groupPreparing:
		resp.ErrorCode = kerr.IllegalGeneration.Code
	case g.state == groupPreparing:
		m.expires = time.Now().Add(m.session)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	default:
		m.expires = time.Now().Add(m.session)
	}
	return resp
}

func (gc *groupCoordinator) leave(req *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := req.Members
	if req.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: req.MemberID}}
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	now := time.Now()
	g := gc.groups[req.Group]
	removed := false
	for _, l := range leaving {
		r := kmsg.NewLeaveGroupResponseMember()
		r.MemberID, r.InstanceID = l.MemberID, l.InstanceID
		id := l.MemberID
		switch {
		case g == nil:
			r.ErrorCode = kerr.UnknownMemberID.Code
		case l.InstanceID != nil:
			known, ok := g.static[*l.InstanceID]
			switch {
			case !ok:
				r.ErrorCode = kerr.UnknownMemberID.Code
			case id != "" && id != known:
				r.ErrorCode = kerr.FencedInstanceID.Code
			default:
				id, r.MemberID = known, known
			}
		}
		if r.ErrorCode == 0 {
			if m := g.members[id]; m != nil {
				gc.removeMember(g, m)
				removed = true
			} else if _, ok := g.pending[id]; ok {
				delete(g.pending, id)
			} else {
				r.ErrorCode = kerr.UnknownMemberID.Code
			}
		}
		resp.Members = append(resp.Members, r)
	}
	if g != nil {
		if removed {
			gc.prepareRebalance(g, now)
		}
		if g.state == groupPreparing {
			gc.tryCompleteJoin(g, now)
		}
	}
	if req.Version < 3 {
		resp.ErrorCode = resp.Members[0].ErrorCode
		resp.Members = nil
	}
	return resp
}

// describe answers DescribeGroups when one of the groups asked about has
// members here; otherwise (nil) kfake answers from its offsets.
func (gc *groupCoordinator) describe(req *kmsg.DescribeGroupsRequest) kmsg.Response {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	ours := false
	for _, name := range req.Groups {
		if g := gc.groups[name]; g != nil && len(g.members) > 0 {
			ours = true
		}
	}
	if !ours {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, name := range req.Groups {
		d := kmsg.NewDescribeGroupsResponseGroup()
		d.Group = name
		d.State = "Dead"
		d.AuthorizedOperations = -2147483648
		if g := gc.groups[name]; g != nil && len(g.members) > 0 {
			d.State, d.ProtocolType, d.Protocol = g.state.String(), g.protocolType, g.protocol
			for _, id := range g.memberIDs() {
				m := g.members[id]
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID, dm.InstanceID, dm.MemberAssignment = m.id, m.instanceID, m.assignment
				for _, p := range m.protocols {
					if p.Name == g.protocol {
						dm.ProtocolMetadata = p.Metadata
					}
				}
				d.Members = append(d.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp
}

// checkCommit validates a group member's offset commit; 0 means it may be
// stored. inTxn commits are not refused during the sync phase (Kafka does
// not either: the transaction is what fences them).
func (gc *groupCoordinator) checkCommit(group, memberID string, instanceID *string, generation int32, inTxn bool) int16 {
	g := gc.groups[group]
	if g == nil || len(g.members) == 0 {
		if memberID == "" && generation < 0 {
			return 0
		}
		return kerr.IllegalGeneration.Code
	}
	if e := g.checkInstance(instanceID, memberID); e != nil {
		return e.Code
	}
	m := g.members[memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case generation != g.generation:
		return kerr.IllegalGeneration.Code
	case !inTxn && g.state == groupCompleting:
		return kerr.RebalanceInProgress.Code
	}
	if m.joinWait == nil && m.syncWait == nil {
		m.expires = time.Now().Add(m.session)
	}
	return 0
}

// offsetCommit checks a member's commit and hands it on to kfake as a
// simple commit (nil); a refused commit is answered here.
func (gc *groupCoordinator) offsetCommit(req *kmsg.OffsetCommitRequest) kmsg.Response {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	code := gc.checkCommit(req.Group, req.MemberID, req.InstanceID, req.Generation, false)
	if code == 0 {
		req.MemberID, req.InstanceID, req.Generation = "", nil, -1
		return nil
	}
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// txnOffsetCommit checks the member and generation of a transactional commit
// (KIP-447) and hands it on to kfake without them (nil).
func (gc *groupCoordinator) txnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	if req.Version < 3 || (req.MemberID == "" && req.Generation == -1) {
		return nil
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	code := gc.checkCommit(req.Group, req.MemberID, req.InstanceID, req.Generation, true)
	if code == 0 {
		req.MemberID, req.InstanceID, req.Generation = "", nil, -1
		return nil
	}
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
