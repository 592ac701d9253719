package s3parquet

import (
	"bytes"
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func newS3Store(ctx context.Context, cfg Config, loc location, o options) (*s3Store, error) {
	load := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.Credentials != nil {
		load = append(load, config.WithCredentialsProvider(cfg.Credentials))
	}
	if o.httpClient != nil {
		load = append(load, config.WithHTTPClient(o.httpClient))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("s3parquet: load AWS config: %w; check AWS_* variables and ~/.aws/config", err)
	}
	client := s3.NewFromConfig(awsCfg, func(so *s3.Options) {
		so.UsePathStyle = cfg.PathStyle
		// The sink retries forever with its own backoff; SDK retries would
		// only stack delays and drain the SDK's retry quota.
		so.Retryer = aws.NopRetryer{}
		if cfg.Endpoint != "" {
			so.BaseEndpoint = aws.String(cfg.Endpoint)
			// Emulators send no response checksums; skip the noisy check.
			so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	st := &s3Store{client: client, bucket: loc.bucket, prefix: loc.prefix, unconditional: cfg.UnconditionalWrites}
	hctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	if _, err := client.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(loc.bucket)}); err != nil {
		return nil, fmt.Errorf("s3parquet: bucket %q is not reachable (%w); create it, or fix url, endpoint, region, path_style or credentials", loc.bucket, err)
	}
	if !cfg.UnconditionalWrites {
		if err := st.probeConditional(hctx, cfg.Endpoint); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// ProbeKey is the small object, under the lake's prefix, that the sink
// writes at start to check that the store honours conditional writes.
// Query engines skip it (its name does not end in .parquet, and Hive-style
// readers ignore paths starting with _).
const ProbeKey = "_kandle/conditional-write-probe"

// probeConditional checks that the store refuses a PUT whose condition
// fails: without that, writes are not fenced and a rebalance could lose
// candles, so the sink refuses to start instead of losing the guarantee
// silently. The probe object exists after the first PUT, so the next PUT
// with If-None-Match: * and one with an ETag it cannot have must both fail
// with 412 Precondition Failed.
func (s *s3Store) probeConditional(ctx context.Context, endpoint string) error {
	body := []byte("kandle checks at start that this store refuses conditional PUTs whose condition fails\n")
	put := func(in *s3.PutObjectInput) error {
		in.Bucket, in.Key = aws.String(s.bucket), aws.String(s.key(ProbeKey))
		in.Body, in.ContentLength = bytes.NewReader(body), aws.Int64(int64(len(body)))
		_, err := s.client.PutObject(ctx, in)
		return err
	}
	if err := put(&s3.PutObjectInput{IfNoneMatch: aws.String("*")}); err != nil && !conflict(err) {
		return fmt.Errorf("s3parquet: write the probe object %s: %w; the sink needs s3:PutObject on the lake's prefix", s.where(ProbeKey), err)
	}
	store := "the S3 store"
	if endpoint != "" {
		store += " at " + endpoint
	}
	for _, c := range []struct {
		what string
		in   s3.PutObjectInput
	}{
		{"If-None-Match: * replaced an existing object", s3.PutObjectInput{IfNoneMatch: aws.String("*")}},
		{"If-Match with an ETag the object does not have replaced it", s3.PutObjectInput{IfMatch: aws.String(`"00000000000000000000000000000000"`)}},
	} {
		err := put(&c.in)
		if err == nil {
			return fmt.Errorf("s3parquet: %s ignores conditional writes (a PUT with %s, probe object %s), so the sink cannot "+
				"keep an instance that lost its partitions from overwriting the objects their new owner wrote; use a store that "+
				"supports If-Match and If-None-Match on PUT (AWS S3, MinIO, …), or, if only one kandle instance ever writes "+
				"this lake, set unconditional_writes: true on the sink", store, c.what, s.where(ProbeKey))
		}
		if !conflict(err) {
			return fmt.Errorf("s3parquet: conditional-write probe %s: %w", s.where(ProbeKey), err)
		}
	}
	return nil
}
