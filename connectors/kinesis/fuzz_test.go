package kinesis

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// FuzzRecordStream is the Kinesis record path of enhanced fan-out: whatever
// bytes a SubscribeToShard stream holds, the initial-response shim passes
// them through unchanged (or behind one synthetic initial-response), the
// SDK's decoder plus toRecords never panic, and every record's data reaches
// the Record the stage processes unchanged.
func FuzzRecordStream(f *testing.F) {
	initial := frame(f, map[string]string{messageTypeHeader: "event", eventTypeHeader: initialResponse, contentTypeHeader: "application/x-amz-json-1.1"}, "{}")
	ev := shardEvent(f, "1")
	f.Add(append(append([]byte(nil), initial...), ev...))
	f.Add(ev)
	f.Add(append(append([]byte(nil), ev...), shardEvent(f, "2")...))
	f.Add(frame(f, map[string]string{messageTypeHeader: "event", eventTypeHeader: "SubscribeToShardEvent", contentTypeHeader: "application/json"},
		`{"ContinuationSequenceNumber":"9","MillisBehindLatest":0,"Records":[{"Data":"AAEC/w==","PartitionKey":"\u0000","SequenceNumber":"9"},{"Data":"","PartitionKey":"k","SequenceNumber":"10"}]}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := io.ReadAll(ensureInitialResponse(bytes.NewReader(body)))
		if err != nil {
			t.Fatalf("shim read: %v", err)
		}
		if !bytes.Equal(got, body) && !bytes.Equal(got, append(append([]byte(nil), syntheticInitialResponse...), body...)) {
			t.Fatalf("shim changed the stream: %d bytes in, %d out", len(body), len(got))
		}
		cl := kinesis.New(kinesis.Options{
			Region: "us-east-1", BaseEndpoint: aws.String("http://kinesis.invalid"), HTTPClient: cannedHTTP{body},
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), RetryMaxAttempts: 1,
		})
		out, err := cl.SubscribeToShard(context.Background(), &kinesis.SubscribeToShardInput{
			ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1"), ShardId: aws.String("shardId-000000000000"),
			StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
		}, withInitialResponseShim)
		if err != nil {
			return
		}
		stream := out.GetStream()
		defer stream.Close()
		for ev := range stream.Events() {
			e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent)
			if !ok {
				continue
			}
			recs := toRecords(e.Value.Records)
			if len(recs) != len(e.Value.Records) {
				t.Fatalf("%d records became %d", len(e.Value.Records), len(recs))
			}
			for i, r := range recs {
				src := e.Value.Records[i]
				if !bytes.Equal(r.Data, src.Data) || r.Seq != aws.ToString(src.SequenceNumber) || r.PartitionKey != aws.ToString(src.PartitionKey) {
					t.Fatalf("record %d changed: %+v from %+v", i, r, src)
				}
			}
		}
		_ = stream.Err()
	})
}
