package s3parquet

import (
	"testing"
	"time"

	"github.com/kandle/kandle/topology/spec"
)

// A Config built in Go gets the default tags' values (withDefaults ignores
// FillDefaults' error, so the tags are checked here).
func TestDefaultsComeFromTags(t *testing.T) {
	if err := spec.FillDefaults(&Config{}); err != nil {
		t.Fatal(err)
	}
	c := Config{URL: "file:///tmp/lake", FlushRows: 7}.withDefaults()
	if c.Region != "us-east-1" || c.RowGroupRows != 100_000 || c.FlushRows != 7 || c.FlushBytes != 16<<20 ||
		c.FlushAge != 30*time.Second || c.Concurrency != 4 || c.RequestTimeout != 30*time.Second || c.MaxBackoff != 10*time.Second {
		t.Fatalf("%+v", c)
	}
}
