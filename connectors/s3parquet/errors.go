package s3parquet

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/kandle/kandle/candle"
)

// Rejected is one candle the sink can never store, and why.
type Rejected struct {
	Candle candle.Candle
	Reason string
}

// RejectedError is returned by Write for candles that can never be stored
// (empty symbol, bad window, a value beyond DECIMAL(38,18)). The other
// candles of the call were accepted; dead-letter these and carry on.
type RejectedError struct {
	Rejected []Rejected
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	b.WriteString("s3parquet: ")
	b.WriteString(strconv.Itoa(len(e.Rejected)))
	b.WriteString(" candle(s) cannot be stored; send them to the dead-letter topic")
	for i, r := range e.Rejected {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		b.WriteString("; ")
		b.WriteString(r.Candle.Timeframe + " " + r.Candle.Symbol + " @" + strconv.FormatInt(r.Candle.OpenTime, 10) + ": " + r.Reason)
	}
	return b.String()
}

// Candles returns the rejected candles.
func (e *RejectedError) Candles() []candle.Candle {
	cs := make([]candle.Candle, len(e.Rejected))
	for i, r := range e.Rejected {
		cs[i] = r.Candle
	}
	return cs
}

// permanent reports whether retrying err cannot help: bad credentials, a
// missing bucket, a corrupt object, a refused request. Network errors,
// timeouts, throttling and 5xx answers are transient.
func permanent(err error) bool {
	if errors.Is(err, errCorrupt) || errors.Is(err, fs.ErrPermission) {
		return true
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	switch apiCode(err) {
	case "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
		"InternalError", "ServiceUnavailable", "ExpiredToken", "RequestExpired":
		return false
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket",
		"InvalidBucketName", "AllAccessDisabled", "AuthorizationHeaderMalformed":
		return true
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		code := re.HTTPStatusCode()
		return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
	}
	return false
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
