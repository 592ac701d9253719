package s3parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// store reads and replaces whole objects by key (a slash-separated path
// relative to the lake root).
type store interface {
	// get returns the object, or found=false when it does not exist.
	get(ctx context.Context, key string) (data []byte, found bool, err error)
	// put stores data under key, replacing any object atomically.
	put(ctx context.Context, key string, data []byte) error
	// where names key for messages ("s3://b/p/key", "/dir/key").
	where(key string) string
}

type s3Store struct {
	client *s3.Client
	bucket string
	prefix string
}

func (s *s3Store) key(k string) string {
	if s.prefix == "" {
		return k
	}
	return s.prefix + "/" + k
}

func (s *s3Store) where(k string) string { return "s3://" + s.bucket + "/" + s.key(k) }

func (s *s3Store) get(ctx context.Context, k string) ([]byte, bool, error) {
	// A whole-object GET: s3rver answers suffix Range requests wrongly, and
	// the object is small enough (one day of one series) to read at once.
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(k))})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) || apiCode(err) == "NoSuchKey" {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("get %s: %w", s.where(k), err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", s.where(k), err)
	}
	return data, true, nil
}

func (s *s3Store) put(ctx context.Context, k string, data []byte) error {
	// bytes.Reader: the SDK needs a seekable body over plain http.
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.key(k)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/vnd.apache.parquet"),
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", s.where(k), err)
	}
	return nil
}

type fileStore struct{ dir string }

func (f *fileStore) where(k string) string {
	return filepath.Join(f.dir, filepath.FromSlash(path.Clean(k)))
}

func (f *fileStore) get(_ context.Context, k string) ([]byte, bool, error) {
	data, err := os.ReadFile(f.where(k))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", f.where(k), err)
	}
	return data, true, nil
}

// put writes a temp file in the target folder, syncs it and renames it over
// the target, so readers see the old or the new file, never a torn one.
func (f *fileStore) put(_ context.Context, k string, data []byte) error {
	dst := f.where(k)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create folder %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(dst)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("rename to %s: %w", dst, err)
	}
	done = true
	// Sync the folder so the rename itself survives a power cut.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
