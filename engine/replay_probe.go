package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// reachable fails with what to do when no broker answers within timeout.
func reachable(ctx context.Context, cl *kgo.Client, brokers []string, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("replay: cannot reach the brokers %v within %s: %w; check --brokers (or the topology's brokers) and that the cluster is up, or raise --timeout", brokers, timeout, err)
	}
	return nil
}

// tailInvisible reports whether partition part of topic holds nothing a
// read-committed reader would deliver in [from, end): only records of
// aborted transactions whose abort markers lie at or past end. It asks the
// partition leader directly (one read-committed fetch per step, parsed as the
// client parses fetches), so the answer never depends on how long the broker
// took: a slow broker yields "not done", never a truncated replay.
func tailInvisible(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, part int32, from, end int64, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("describe %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return false, fmt.Errorf("describe %s: %v", topic, td.Err)
	}
	pd, ok := td.Partitions[part]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return false, fmt.Errorf("describe %s[%d]: no leader (%v)", topic, part, pd.Err)
	}
	br := cl.Broker(int(pd.Leader))
	for from < end {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = 4 << 20
		req.IsolationLevel = 1 // read committed
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = part, from, 4<<20
		rp.CurrentLeaderEpoch, rp.LogStartOffset, rp.LastFetchedEpoch = -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			return false, fmt.Errorf("fetch %s[%d] at %d: %w", topic, part, from, err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return false, fmt.Errorf("fetch %s[%d] at %d: %w", topic, part, from, err)
		}
		var got *kmsg.FetchResponseTopicPartition
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if resp.Topics[i].Partitions[j].Partition == part {
					got = &resp.Topics[i].Partitions[j]
				}
			}
		}
		if got == nil {
			return false, fmt.Errorf("fetch %s[%d] at %d: the broker did not answer for the partition", topic, part, from)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			KeepControlRecords: true, Offset: from, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: part,
		}, got, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return false, fmt.Errorf("fetch %s[%d] at %d: %w", topic, part, from, fp.Err)
		}
		if len(fp.Records) > 0 {
			// Anything deliverable before end (a record or a marker) is
			// still to come through the consumer.
			return fp.Records[0].Offset >= end, nil
		}
		if next <= from {
			return false, nil // nothing returned yet: not known to be done
		}
		from = next
	}
	return true, nil
}
