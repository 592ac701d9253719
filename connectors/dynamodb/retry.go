package dynamodb

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// errClass says what to do about a failed request.
type errClass int

const (
	classTransient  errClass = iota // retry with backoff
	classThrottled                  // retry with backoff (counted apart)
	classValidation                 // the request (or an item in it) is invalid
	classPermanent                  // configuration or permission problem
)

func (c errClass) String() string {
	return [...]string{"transient", "throttled", "validation", "permanent"}[c]
}

// classify decides whether err is worth retrying. Anything that is not a
// clear client-side API error (network failures, 5xx, unknown errors) is
// transient: an outage should pause the stage, not lose data.
func classify(err error) errClass {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"LimitExceededException", "TooManyRequestsException":
			return classThrottled
		case "InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException",
			"TransactionInProgressException", "ItemCollectionSizeLimitExceededException":
			return classTransient
		case "ValidationException", "SerializationException":
			return classValidation
		}
		if (retry.ThrottleErrorCode{Codes: retry.DefaultThrottleErrorCodes}).IsErrorThrottle(err).Bool() {
			return classThrottled
		}
		var resp *smithyhttp.ResponseError
		if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
			return classTransient
		}
		if api.ErrorFault() == smithy.FaultServer {
			return classTransient
		}
		return classPermanent
	}
	return classTransient
}
