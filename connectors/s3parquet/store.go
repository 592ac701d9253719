package s3parquet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// store reads and replaces whole objects by key (a slash-separated path
// relative to the lake root). Replacing is a compare-and-swap: put names the
// version its caller read, and fails with errConflict when the object has
// changed since, so a writer that was cut off while its write hung can never
// overwrite what the partition's next owner wrote meanwhile.
type store interface {
	// get returns the object and its version (an opaque tag put compares
	// with), or found=false when it does not exist.
	get(ctx context.Context, key string) (data []byte, version string, found bool, err error)
	// put stores data under key, replacing the object atomically, if the
	// object is still at version (found=false: if it still does not
	// exist). Otherwise it writes nothing and returns an error wrapping
	// errConflict. After a write it reports the new object's version with
	// reportPutVersion(ctx, …) (nothing when the store returned none).
	put(ctx context.Context, key string, data []byte, version string, found bool) error
	// where names key for messages ("s3://b/p/key", "/dir/key").
	where(key string) string
}

// errConflict: the object changed between a get and the put that was based
// on it (another writer got there first). Read, merge and write again.
var errConflict = errors.New("the object changed since it was read (another writer replaced it)")

type s3Store struct {
	client *s3.Client
	bucket string
	prefix string
	// unconditional drops If-Match / If-None-Match from PUTs, for stores
	// that ignore them (Config.UnconditionalWrites).
	unconditional bool
}

func (s *s3Store) key(k string) string {
	if s.prefix == "" {
		return k
	}
	return s.prefix + "/" + k
}

func (s *s3Store) where(k string) string { return "s3://" + s.bucket + "/" + s.key(k) }

func (s *s3Store) get(ctx context.Context, k string) ([]byte, string, bool, error) {
	// A whole-object GET: s3rver answers suffix Range requests wrongly, and
	// the object is small enough (one day of one series) to read at once.
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.key(k))})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) || apiCode(err) == "NoSuchKey" {
			return nil, "", false, nil
		}
		return nil, "", false, fmt.Errorf("get %s: %w", s.where(k), err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", false, fmt.Errorf("read %s: %w", s.where(k), err)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" && !s.unconditional {
		return nil, "", false, fmt.Errorf("get %s: the store sent no ETag, so writes cannot be made conditional; "+
			"use a store that supports conditional writes, or set unconditional_writes: true (single writer only)", s.where(k))
	}
	return data, etag, true, nil
}

func (s *s3Store) put(ctx context.Context, k string, data []byte, version string, found bool) error {
	// bytes.Reader: the SDK needs a seekable body over plain http.
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(s.key(k)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/vnd.apache.parquet"),
	}
	if !s.unconditional {
		if found {
			in.IfMatch = aws.String(version)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
	}
	out, err := s.client.PutObject(ctx, in)
	if err != nil {
		if !s.unconditional && conflict(err) {
			return fmt.Errorf("put %s: %w: %w", s.where(k), errConflict, err)
		}
		return fmt.Errorf("put %s: %w", s.where(k), err)
	}
	reportPutVersion(ctx, aws.ToString(out.ETag))
	return nil
}

// conflict reports whether a conditional PUT failed because its condition
// did not hold: 412 PreconditionFailed (the ETag differs, or the object
// appeared), 409 ConditionalRequestConflict (a concurrent conditional write
// won), or 404 (an If-Match object was deleted meanwhile).
func conflict(err error) bool {
	switch apiCode(err) {
	case "PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey":
		return true
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusPreconditionFailed, http.StatusConflict:
			return true
		}
	}
	return false
}

type fileStore struct{ dir string }

func (f *fileStore) where(k string) string {
	return filepath.Join(f.dir, filepath.FromSlash(path.Clean(k)))
}

// get reads the file; its version is the SHA-256 of its bytes.
func (f *fileStore) get(_ context.Context, k string) ([]byte, string, bool, error) {
	data, err := os.ReadFile(f.where(k))
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("read %s: %w", f.where(k), err)
	}
	return data, fileVersion(data), true, nil
}

func fileVersion(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// LockName is the file at the root of a file:// lake that writers lock
// (flock) around each compare-and-rename.
const LockName = ".kandle-lake.lock"

// put writes a temp file in the target folder and syncs it; then, holding
// the lake's lock file (LockName: an advisory lock that every kandle
// process on this machine, or on a file system with working locks,
// honours), checks that the target is still the version the caller read
// and renames the temp file over it. Readers see the old or the
// new file, never a torn one, and a writer that was paused between its read
// and its write cannot replace what another wrote meanwhile.
func (f *fileStore) put(ctx context.Context, k string, data []byte, version string, found bool) error {
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
	unlock, err := lockFile(filepath.Join(f.dir, LockName))
	if err != nil {
		return fmt.Errorf("lock %s: %w", dst, err)
	}
	defer unlock()
	cur, err := os.ReadFile(dst)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if found {
			return fmt.Errorf("write %s: %w (it was deleted)", dst, errConflict)
		}
	case err != nil:
		return fmt.Errorf("read %s: %w", dst, err)
	case !found:
		return fmt.Errorf("write %s: %w (it was created)", dst, errConflict)
	case fileVersion(cur) != version:
		return fmt.Errorf("write %s: %w", dst, errConflict)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("rename to %s: %w", dst, err)
	}
	done = true
	reportPutVersion(ctx, fileVersion(data))
	// Sync the folder so the rename itself survives a power cut.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
