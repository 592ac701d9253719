package kinesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// registerTimeout bounds the wait for a stream consumer to become ACTIVE.
const registerTimeout = 2 * time.Minute

// ensureStreamConsumer returns the ARN of the stream consumer named name,
// registering it if missing and waiting until it is ACTIVE. Any number of
// instances may call it at once: a concurrent registration makes the losers'
// RegisterStreamConsumer fail with ResourceInUseException, after which they
// simply describe the consumer again.
func ensureStreamConsumer(ctx context.Context, api FanOutAPI, stream, name string, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, registerTimeout,
		fmt.Errorf("kinesis: stream consumer %q of %s not ACTIVE after %v", name, stream, registerTimeout))
	defer cancel()
	streamARN, err := describeStreamARN(ctx, api, stream)
	if err != nil {
		return "", err
	}
	failures := 0
	retry := func(err error, what string) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !isThrottle(err) && !isInUse(err) {
			if failures++; failures >= maxConsecutiveErrors {
				return fmt.Errorf("kinesis: %s stream consumer %q of %s: %w", what, name, stream, err)
			}
			log.Warn("kinesis: stream consumer call failed, retrying", "call", what, "consumer", name, "err", err)
		}
		return nil
	}
	for attempt := 1; ; attempt++ {
		d, err := api.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{StreamARN: &streamARN, ConsumerName: &name})
		var nf *types.ResourceNotFoundException
		switch {
		case err == nil && d.ConsumerDescription != nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive:
			arn := aws.ToString(d.ConsumerDescription.ConsumerARN)
			log.Info("kinesis: enhanced fan-out consumer active", "consumer", name, "consumer_arn", arn)
			return arn, nil
		case err == nil: // CREATING, or DELETING (then it is registered anew once gone)
		case errors.As(err, &nf):
			_, err := api.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: &streamARN, ConsumerName: &name})
			switch {
			case err == nil:
				log.Info("kinesis: registered enhanced fan-out consumer", "consumer", name)
			case isInUse(err): // another instance registered it first
			default:
				if err := retry(err, "register"); err != nil {
					return "", err
				}
			}
		default:
			if err := retry(err, "describe"); err != nil {
				return "", err
			}
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return "", err
		}
	}
}

// describeStreamARN returns the stream's ARN (stream consumers belong to an ARN).
func describeStreamARN(ctx context.Context, api FanOutAPI, stream string) (string, error) {
	for attempt := 1; ; attempt++ {
		out, err := api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
		if err == nil {
			return aws.ToString(out.StreamDescriptionSummary.StreamARN), nil
		}
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if !isThrottle(err) || attempt >= maxConsecutiveErrors {
			return "", fmt.Errorf("kinesis: describe stream %q (does it exist?): %w", stream, err)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return "", err
		}
	}
}
