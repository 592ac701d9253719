package kinesis

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kandle/kandle/internal/testkit"
)

// onKinesalite returns e rebound to a kinesalite server with a 1-shard
// stream. Kinesalite never sends ChildShards at SHARD_END, so resharding
// there is discovered only by ListShards.
func (e *env) onKinesalite(t *testing.T, stream string) *env {
	t.Helper()
	port := testkit.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin := filepath.Join(testkit.EmuDir(t), "node_modules", ".bin", "kinesalite")
	testkit.Start(t, "kinesalite", addr, func() error {
		resp, err := http.Get("http://" + addr) // any answer (403) means ready
		if err == nil {
			resp.Body.Close()
		}
		return err
	}, "node", []string{bin, "--port", fmt.Sprint(port), "--createStreamMs", "10", "--deleteStreamMs", "10", "--updateStreamMs", "10"})
	kin, _, err := NewClients(context.Background(), "us-east-1", "http://"+addr, "http://unused.invalid",
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kin.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	c := *e
	c.kin = kin
	return c.on(t, stream)
}
