package kinesis

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// NewClients builds Kinesis and DynamoDB clients from the default AWS
// credential chain. Empty endpoints use AWS; set them for emulators.
func NewClients(ctx context.Context, region, kinesisEndpoint, dynamoEndpoint string, opts ...func(*config.LoadOptions) error) (*kinesis.Client, *dynamodb.Client, error) {
	if region == "" {
		region = "us-east-1"
	}
	cfg, err := config.LoadDefaultConfig(ctx, append([]func(*config.LoadOptions) error{config.WithRegion(region)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kinesis: load AWS config (check AWS_* environment and ~/.aws): %w", err)
	}
	kin := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) {
		if kinesisEndpoint != "" {
			o.BaseEndpoint = aws.String(kinesisEndpoint)
		}
	})
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if dynamoEndpoint != "" {
			o.BaseEndpoint = aws.String(dynamoEndpoint)
		}
	})
	return kin, ddb, nil
}
