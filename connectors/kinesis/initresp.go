package kinesis

import (
	"bytes"
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// SubscribeToShard answers with an event stream whose first message, on
// AWS, is an "initial-response" event; aws-sdk-go-v2 insists on reading it
// before any SubscribeToShardEvent and fails with "deserialize initial
// response: expected initial-response, got SubscribeToShardEvent" when it is
// missing. kinesis-mock (npm kinesis-local 0.6.2) starts with the first
// SubscribeToShardEvent instead. Rather than fork the SDK, this middleware
// wraps the response body and, when the first message is anything but an
// initial-response, yields a synthetic empty one before it. Against AWS the
// body passes through byte for byte.

// withInitialResponseShim is a SubscribeToShard option func that installs the shim.
func withInitialResponseShim(o *kinesis.Options) {
	o.APIOptions = append(o.APIOptions, addInitialResponseShim)
}

// addInitialResponseShim places the shim between the SDK's event stream
// deserializer (which reads the initial response from the body after the
// inner handlers return) and the operation deserializer (which turns non-2xx
// answers into errors and must see the body untouched).
func addInitialResponseShim(stack *middleware.Stack) error {
	return stack.Deserialize.Insert(initialResponseShim{}, "OperationEventStreamDeserializer", middleware.After)
}

type initialResponseShim struct{}

func (initialResponseShim) ID() string { return "KandleInitialResponseShim" }

func (initialResponseShim) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp.Body != nil && resp.StatusCode/100 == 2 {
		resp.Body = &initialResponseBody{ReadCloser: resp.Body}
	}
	return out, md, nil
}

// initialResponseBody is an event stream body that is guaranteed to start
// with an initial-response message. The first Read decodes the first
// message; Close closes the HTTP body.
type initialResponseBody struct {
	io.ReadCloser
	r io.Reader // nil until the first Read
}

func (b *initialResponseBody) Read(p []byte) (int, error) {
	if b.r == nil {
		b.r = ensureInitialResponse(b.ReadCloser)
	}
	return b.r.Read(p)
}

// ensureInitialResponse reads the first message of body and returns a reader
// of the whole stream, with a synthetic initial-response in front when the
// first message is not one. Anything it cannot decode passes through as is:
// the SDK's decoder then reports it.
func ensureInitialResponse(body io.Reader) io.Reader {
	var first bytes.Buffer
	msg, err := eventstream.NewDecoder().Decode(io.TeeReader(body, &first), nil)
	rest := io.MultiReader(bytes.NewReader(first.Bytes()), body)
	if err != nil {
		return rest
	}
	if t := msg.Headers.Get(eventTypeHeader); t != nil && t.String() == initialResponse {
		return rest
	}
	return io.MultiReader(bytes.NewReader(syntheticInitialResponse), rest)
}

const (
	eventTypeHeader   = ":event-type"
	messageTypeHeader = ":message-type"
	contentTypeHeader = ":content-type"
	initialResponse   = "initial-response"
)

// syntheticInitialResponse is the message AWS sends first: an event of type
// initial-response with an empty JSON object (SubscribeToShardOutput has no
// members besides the stream).
var syntheticInitialResponse = func() []byte {
	var m eventstream.Message
	m.Headers.Set(messageTypeHeader, eventstream.StringValue("event"))
	m.Headers.Set(eventTypeHeader, eventstream.StringValue(initialResponse))
	m.Headers.Set(contentTypeHeader, eventstream.StringValue("application/x-amz-json-1.1"))
	m.Payload = []byte("{}")
	var buf bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&buf, m); err != nil {
		panic("kinesis: encode synthetic initial-response: " + err.Error()) // fixed input: cannot happen
	}
	return buf.Bytes()
}()
