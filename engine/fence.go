package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// proveMembership makes a transaction that consumed nothing carry the group
// coordinator's generation check.
//
// kgo's GroupTransactSession sends TxnOffsetCommit only for offsets that
// moved, and that request is what fences a zombie (an instance paused past
// its session timeout whose partitions now belong to another member). A
// transaction holding only idle-advance outputs — final and gap candles the
// wall clock closed on a quiet partition — has no moved offset, so without
// this a zombie could commit candles the new owner also writes. Like Kafka
// Streams, we commit the unchanged positions of the partitions we own: the
// coordinator refuses them with ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID if we
// are no longer the member that owns them, and the caller aborts.
func (s *liveStage) proveMembership(ctx context.Context) error {
	cl := s.sess.Client()
	member, generation := cl.GroupMetadata()
	if member == "" {
		return errors.New("not a member of the group (yet)")
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = s.spec.InputTopic
	if s.inputTopicID == [16]byte{} { // TxnOffsetCommit v6+ names topics by id
		td, err := s.admin.ListTopics(ctx, s.spec.InputTopic)
		if err != nil {
			return fmt.Errorf("look up topic %s: %w", s.spec.InputTopic, err)
		}
		if err := td.Error(); err != nil {
			return fmt.Errorf("look up topic %s: %w", s.spec.InputTopic, err)
		}
		s.inputTopicID = td[s.spec.InputTopic].ID
	}
	rt.TopicID = s.inputTopicID
	for p, ps := range s.parts {
		if ps.nextInput == 0 {
			continue // never consumed: no committed position to restate
		}
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, ps.nextInput, -1
		if md, ok := s.snapMetadata(p); ok { // restated too: a commit without it would forget the snapshot
			rp.Metadata = &md
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	if len(rt.Partitions) == 0 {
		return nil // nothing ever consumed, so idle advance had nothing to close
	}
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	// Tie the group to the transaction (implicit in TxnOffsetCommit v5+,
	// required before it; harmless to repeat).
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = s.txnID, id, epoch, s.group
	addResp, err := add.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	if err := kerr.ErrorForCode(addResp.ErrorCode); err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = s.txnID, s.group, id, epoch
	req.MemberID, req.Generation = member, generation
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("commit unchanged offsets: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownTopicID) {
					s.inputTopicID = [16]byte{} // recreated: look it up again next time
				}
				return fmt.Errorf("commit unchanged offset of partition %d (member %s, generation %d): %w", p.Partition, member, generation, err)
			}
		}
	}
	return nil
}
