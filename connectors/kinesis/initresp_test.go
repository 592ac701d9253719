package kinesis

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// cannedHTTP answers every request with 200 and body.
type cannedHTTP struct{ body []byte }

func (c cannedHTTP) Do(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/vnd.amazon.eventstream"}},
		Body:   io.NopCloser(bytes.NewReader(c.body)), Request: req,
	}, nil
}

func frame(t testing.TB, headers map[string]string, payload string) []byte {
	t.Helper()
	var m eventstream.Message
	for _, k := range []string{messageTypeHeader, eventTypeHeader, ":exception-type", contentTypeHeader} {
		if v, ok := headers[k]; ok {
			m.Headers.Set(k, eventstream.StringValue(v))
		}
	}
	m.Payload = []byte(payload)
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func shardEvent(t testing.TB, seq string) []byte {
	return frame(t, map[string]string{messageTypeHeader: "event", eventTypeHeader: "SubscribeToShardEvent", contentTypeHeader: "application/json"},
		`{"ContinuationSequenceNumber":"`+seq+`","MillisBehindLatest":7,"Records":[{"Data":"aGk=","PartitionKey":"k","SequenceNumber":"`+seq+`","ApproximateArrivalTimestamp":1700000000}]}`)
}

// subscribeCanned runs SubscribeToShard against body and returns the
// sequence numbers of the events it decodes and the stream's error.
func subscribeCanned(t *testing.T, body []byte, opts ...func(*kinesis.Options)) ([]string, error) {
	t.Helper()
	cl := kinesis.New(kinesis.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://kinesis.invalid"), HTTPClient: cannedHTTP{body},
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	out, err := cl.SubscribeToShard(context.Background(), &kinesis.SubscribeToShardInput{
		ConsumerARN: aws.String("arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1"), ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
	}, opts...)
	if err != nil {
		return nil, err
	}
	stream := out.GetStream()
	defer stream.Close()
	var seqs []string
	for ev := range stream.Events() {
		e := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent).Value
		if aws.ToInt64(e.MillisBehindLatest) != 7 || len(e.Records) != 1 || string(e.Records[0].Data) != "hi" {
			t.Fatalf("event decoded as %+v", e)
		}
		seqs = append(seqs, aws.ToString(e.ContinuationSequenceNumber))
	}
	return seqs, stream.Err()
}

// The shim lets the SDK read an event stream without initial-response (as
// kinesis-mock sends it) and leaves one with it (as AWS sends it) untouched.
func TestInitialResponseShim(t *testing.T) {
	events := append(shardEvent(t, "1"), shardEvent(t, "2")...)
	initial := frame(t, map[string]string{messageTypeHeader: "event", eventTypeHeader: initialResponse, contentTypeHeader: "application/x-amz-json-1.1"}, "{}")
	withInitial := append(append([]byte(nil), initial...), events...)

	// Why the shim exists: the SDK alone rejects the emulator's stream.
	if _, err := subscribeCanned(t, events); err == nil || !strings.Contains(err.Error(), "expected initial-response") {
		t.Fatalf("without the shim: want the SDK's initial-response error, got %v", err)
	}
	for name, body := range map[string][]byte{"without initial-response": events, "with initial-response": withInitial} {
		seqs, err := subscribeCanned(t, body, withInitialResponseShim)
		if err != nil || strings.Join(seqs, ",") != "1,2" {
			t.Errorf("%s: events %v, err %v; want 1,2", name, seqs, err)
		}
	}
	// With initial-response the body passes through byte for byte.
	if got, _ := io.ReadAll(ensureInitialResponse(bytes.NewReader(withInitial))); !bytes.Equal(got, withInitial) {
		t.Error("a stream that starts with initial-response was changed")
	}
	if got, _ := io.ReadAll(ensureInitialResponse(bytes.NewReader(events))); !bytes.Equal(got, append(append([]byte(nil), syntheticInitialResponse...), events...)) {
		t.Error("synthetic initial-response not prepended exactly once")
	}
	// An exception as first message (kinesis-mock's "another subscription
	// is active") surfaces as the typed error the reader backs off on.
	inUse := frame(t, map[string]string{messageTypeHeader: "exception", ":exception-type": "ResourceInUseException", contentTypeHeader: "application/json"},
		`{"message":"Another active subscription exists"}`)
	_, err := subscribeCanned(t, inUse, withInitialResponseShim)
	var riu *types.ResourceInUseException
	if !errors.As(err, &riu) {
		t.Fatalf("exception frame: want ResourceInUseException, got %T %v", err, err)
	}
	// Empty and truncated bodies still fail in the SDK, not silently.
	for _, body := range [][]byte{nil, events[:20]} {
		if _, err := subscribeCanned(t, body, withInitialResponseShim); err == nil {
			t.Errorf("body of %d bytes: no error", len(body))
		}
	}
}
