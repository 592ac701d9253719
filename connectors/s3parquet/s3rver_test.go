package s3parquet

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kandle/kandle/internal/testkit"
)

// TestS3rver runs the sink against a separate S3 server process (s3rver):
// a first flush creates the objects, a second sink (a restart) merges more
// candles into them, reading each existing object back whole.
func TestS3rver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.S3rver(t)
	c := s3Client(srv.URL(), "S3RVER", "S3RVER")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lake")}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{URL: "s3://lake/prod/candles", Endpoint: srv.URL(), PathStyle: true,
		Credentials:         credentials.NewStaticCredentialsProvider("S3RVER", "S3RVER", ""),
		UnconditionalWrites: true} // s3rver ignores If-Match / If-None-Match on PUT (TestS3rverRefusedWithoutConditionalWrites)
	cs := gen("BTC/USDT", "ETH-USD")
	half := len(cs) / 2

	first, err := New(ctx, cfg, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, first, cs[:half+100], 500)
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := listObjects(t, c, "lake")

	// A restart redelivers 100 candles and continues: each touched day's
	// object is read back and merged.
	second, err := New(ctx, cfg, WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, second, cs[half:], 500)
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after := listObjects(t, c, "lake")
	checkObjects(t, after, expectedObjects("prod/candles", cs))

	merged := 0
	want := expectedObjects("prod/candles", cs)
	for k, old := range before {
		prev, _ := Decode(old)
		if len(prev) > 0 && len(prev) < len(want[k]) {
			merged++ // this object existed partly and was completed by the merge
		}
	}
	if merged == 0 {
		t.Fatal("no object was partly written by the first sink and completed by the second")
	}

	// A wrong bucket fails at New with a message saying what to do.
	bad := cfg
	bad.URL = "s3://missing-bucket/x"
	if _, err := New(ctx, bad, WithLogger(quietLogger())); err == nil {
		t.Fatal("New with a missing bucket succeeded")
	} else {
		t.Logf("missing bucket: %v", err)
	}
}
