package kafka

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kandle/kandle/internal/testkit"
)

// A dev broker with SASL users serves groups with kandle's coordinator
// too: a member killed without leaving (its connections reset, as a
// SIGKILLed process's are) is removed after its session timeout and the
// other member, logged in with another mechanism, takes every partition.
// A client that has not logged in reaches no group: its JoinGroup and
// DescribeGroups close the connection, and the group does not change.
func TestDevBrokerSASLGroupsUseKandlesCoordinator(t *testing.T) {
	t.Parallel()
	const topic, group, parts = "sasl-in", "sasl-group", 4
	b := startBroker(t, WithSeedTopics(parts, topic), WithSASLUser("alice", "wonder land"))
	if b.groups == nil {
		t.Fatal("the SASL dev broker serves groups with kfake's coordinator")
	}
	scramAuth := scram.Auth{User: "alice", Pass: "wonder land"}.AsSha256Mechanism()
	plainAuth := plain.Auth{User: "alice", Pass: "wonder land"}.AsMechanism()
	adm := kadm.NewClient(newClient(t, b.Addrs(), kgo.SASL(scramAuth)))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	member := func(name string, auth kgo.Opt) (*kgo.Client, *testkit.Proxy) {
		p := testkit.StartKafkaProxy(t, b.Addrs()[0])
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), auth, kgo.ClientID(name), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic), kgo.SessionTimeout(devMinSessionTimeout), kgo.RebalanceTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !cl.PollFetches(ctx).IsClientClosed() && ctx.Err() == nil {
			}
		}()
		t.Cleanup(func() { cancel(); cl.Close(); <-done })
		return cl, p
	}
	// settled waits until the group is stable with n members that own
	// every partition once, and returns the member ids.
	settled := func(n int, what string) map[string]bool {
		t.Helper()
		for {
			if ctx.Err() != nil {
				t.Fatalf("%s: the group did not settle with %d members", what, n)
			}
			time.Sleep(500 * time.Millisecond)
			dg, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				continue
			}
			g := dg[group]
			if g.State != "Stable" || len(g.Members) != n {
				continue
			}
			owned, ids := 0, map[string]bool{}
			for _, m := range g.Members {
				ids[m.MemberID] = true
				if as, ok := m.Assigned.AsConsumer(); ok {
					for _, tp := range as.Topics {
						owned += len(tp.Partitions)
					}
				}
			}
			if owned == parts {
				return ids
			}
		}
	}
	a, _ := member("a", kgo.SASL(scramAuth))
	_, dp := member("d", kgo.SASL(plainAuth))
	if ids := settled(2, "two members"); len(ids) != 2 {
		t.Fatalf("members %v", ids)
	}
	aID, _ := a.GroupMetadata()
	dp.Kill()
	killed := time.Now()
	ids := settled(1, "after d was killed")
	if !ids[aID] {
		t.Fatalf("the member left is %v, want a (%s)", ids, aID)
	}
	if took := time.Since(killed); took > devMinSessionTimeout+15*time.Second {
		t.Errorf("a took d's partitions %s after d was killed, want within its session timeout plus a rebalance", took)
	}

	// A client that never logs in, sending group requests straight to the
	// coordinator (a Kafka client would fail earlier, at FindCoordinator).
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 5
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = group, "consumer", 6000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0}}}
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Version = 4
	describe.Groups = []string{group}
	for _, req := range []kmsg.Request{join, describe} {
		if answer, err := rawRequest(b.Addrs()[0], req); err == nil {
			t.Errorf("an unauthenticated %T was answered (%d bytes)", req, len(answer))
		}
	}
	if ids := settled(1, "after the unauthenticated requests"); !ids[aID] {
		t.Errorf("the group changed: members %v", ids)
	}
}

// rawRequest sends req (a version without flexible headers) on a new
// connection to addr, without logging in, and returns the answer's body, or
// the error of a connection the broker closed.
func rawRequest(addr string, req kmsg.Request) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := []byte{0, 0, 0, 0}
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, 1) // correlation ID
	buf = binary.BigEndian.AppendUint16(buf, 4) // client ID
	buf = append(buf, "anon"...)
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if _, err := conn.Write(buf); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return nil, err
	}
	answer := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(conn, answer)
	return answer, err
}
