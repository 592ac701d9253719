package s3parquet

import (
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
	st := &s3Store{client: client, bucket: loc.bucket, prefix: loc.prefix}
	hctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	if _, err := client.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(loc.bucket)}); err != nil {
		return nil, fmt.Errorf("s3parquet: bucket %q is not reachable (%w); create it, or fix url, endpoint, region, path_style or credentials", loc.bucket, err)
	}
	return st, nil
}
