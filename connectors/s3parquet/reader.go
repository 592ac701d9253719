package s3parquet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/kandle/kandle/candle"
)

// Reader reads candles back from the lake for kandle serve. A request for
// [from, to) opens only the objects of that symbol/timeframe/day partitions,
// reads each object's footer, skips the row groups whose open_time
// statistics lie outside the range, and reads only the columns a candle
// needs (not symbol and timeframe, which the partition names). Every read
// is a GET with an explicit byte range computed from HeadObject's size
// (never a suffix range: some S3 emulators answer those wrongly).
type Reader struct {
	cfg    Config
	client *s3.Client // nil for a file:// lake
	loc    location

	reads, bytes atomic.Int64
}

// NewReader connects to the lake of cfg (checking the bucket exists).
func NewReader(ctx context.Context, cfg Config, opts ...Option) (*Reader, error) {
	cfg = cfg.withDefaults()
	if bad := cfg.Validate(); len(bad) > 0 {
		return nil, fmt.Errorf("s3parquet: invalid config: %s", strings.Join(bad, "; "))
	}
	loc, _ := parseURL(cfg.URL)
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	r := &Reader{cfg: cfg, loc: loc}
	if loc.isFile() {
		return r, nil
	}
	st, err := newS3Store(ctx, cfg, loc, o)
	if err != nil {
		return nil, err
	}
	r.client = st.client
	return r, nil
}

// ReadStats returns how many ranged reads the reader made and how many
// bytes they returned (HeadObject calls not included).
func (r *Reader) ReadStats() (reads, bytes int64) { return r.reads.Load(), r.bytes.Load() }

// ObjectSize returns the size of the partition object of (symbol, tf) that
// holds openTime, or 0 when there is none (for measurements).
func (r *Reader) ObjectSize(ctx context.Context, symbol, tf string, openTime int64) (int64, error) {
	obj, ok, err := r.open(ctx, PartitionPath(tf, symbol, openTime))
	if err != nil || !ok {
		return 0, err
	}
	obj.Close()
	return obj.size, nil
}

// Candles returns at most limit candles (limit <= 0: all) of symbol and
// timeframe tf with open_time in [from, to), oldest first, or newest first
// with newestFirst. Partitions are visited in that direction and reading
// stops once limit candles are found, so a page of recent history touches
// only the newest days.
func (r *Reader) Candles(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	if to <= from {
		return nil, nil
	}
	days := partitionDays(tf, from, to)
	if newestFirst {
		for i, j := 0, len(days)-1; i < j; i, j = i+1, j-1 {
			days[i], days[j] = days[j], days[i]
		}
	}
	conc := max(r.cfg.Concurrency, 1)
	var out []candle.Candle
	for start := 0; start < len(days); start += conc {
		batch := days[start:min(start+conc, len(days))]
		res := make([][]candle.Candle, len(batch))
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, day := range batch {
			wg.Go(func() {
				res[i], errs[i] = r.readPartition(ctx, symbol, tf.String(), day*86_400_000, from, to)
			})
		}
		wg.Wait()
		for i := range batch {
			if errs[i] != nil {
				return nil, errs[i]
			}
			cs := res[i]
			if newestFirst {
				for a, b := 0, len(cs)-1; a < b; a, b = a+1, b-1 {
					cs[a], cs[b] = cs[b], cs[a]
				}
			}
			out = append(out, cs...)
			if limit > 0 && len(out) >= limit {
				return out[:limit], nil
			}
		}
	}
	return out, nil
}

// partitionDays lists the UTC days that can hold a partition of candles
// opening in [from, to): every day for timeframes shorter than a day, only
// the days windows open on for longer ones (a range of years of 1M candles
// touches a few dozen objects, not thousands of days).
func partitionDays(tf candle.Timeframe, from, to int64) []int64 {
	first := tf.Start(from)
	if tf.End(first)-first < 86_400_000 {
		var days []int64
		for d := dayOf(from); d <= dayOf(to-1); d++ {
			days = append(days, d)
		}
		return days
	}
	var days []int64
	for o := first; o < to; o = tf.End(o) {
		if d := dayOf(o); len(days) == 0 || days[len(days)-1] != d {
			days = append(days, d)
		}
	}
	return days
}

// object is one opened lake object.
type object struct {
	io.ReaderAt
	size  int64
	close func()
}

func (o *object) Close() {
	if o.close != nil {
		o.close()
	}
}

// open finds the object at key (relative to the lake root).
func (r *Reader) open(ctx context.Context, key string) (*object, bool, error) {
	if r.client == nil {
		p := (&fileStore{dir: r.loc.dir}).where(key)
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("s3parquet: open %s: %w", p, err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("s3parquet: stat %s: %w", p, err)
		}
		return &object{ReaderAt: &countingReaderAt{r: f, reader: r}, size: st.Size(), close: func() { f.Close() }}, true, nil
	}
	st := &s3Store{client: r.client, bucket: r.loc.bucket, prefix: r.loc.prefix}
	k := st.key(key)
	head, err := r.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(st.bucket), Key: aws.String(k)})
	if err != nil {
		var nf *types.NotFound
		var nsk *types.NoSuchKey
		if errors.As(err, &nf) || errors.As(err, &nsk) || apiCode(err) == "NotFound" || apiCode(err) == "NoSuchKey" || notFoundStatus(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("s3parquet: head %s: %w", st.where(key), err)
	}
	size := aws.ToInt64(head.ContentLength)
	return &object{ReaderAt: &rangeReaderAt{ctx: ctx, r: r, bucket: st.bucket, key: k, where: st.where(key), size: size}, size: size}, true, nil
}

// notFoundStatus reports an HTTP 404 (HeadObject has no error body, so
// some servers' answers carry no error code).
func notFoundStatus(err error) bool {
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

// rangeReaderAt reads an S3 object with one ranged GET per ReadAt.
type rangeReaderAt struct {
	ctx         context.Context
	r           *Reader
	bucket, key string
	where       string
	size        int64
}

func (a *rangeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= a.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), a.size-off)
	if n <= 0 {
		return 0, nil
	}
	out, err := a.r.client.GetObject(a.ctx, &s3.GetObjectInput{
		Bucket: aws.String(a.bucket), Key: aws.String(a.key),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		return 0, fmt.Errorf("s3parquet: get %s bytes %d-%d: %w", a.where, off, off+n-1, err)
	}
	defer out.Body.Close()
	got, err := io.ReadFull(out.Body, p[:n])
	a.r.reads.Add(1)
	a.r.bytes.Add(int64(got))
	if err != nil {
		return got, fmt.Errorf("s3parquet: read %s bytes %d-%d: %w", a.where, off, off+n-1, err)
	}
	if n < int64(len(p)) {
		return got, io.EOF
	}
	return got, nil
}

type countingReaderAt struct {
	r      io.ReaderAt
	reader *Reader
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.reader.reads.Add(1)
	c.reader.bytes.Add(int64(n))
	return n, err
}

// readBuffer is the read size for column chunks: one day of one series is
// a few tens of KiB per column, so a chunk is one ranged GET.
const readBuffer = 1 << 20

// columns a candle is built from, by their Parquet names.
var candleColumns = []string{"open_time", "close_time", "open", "high", "low", "close", "volume", "quote_volume", "trades", "gap"}

// readPartition returns the candles of one partition object with open_time
// in [from, to), oldest first.
func (r *Reader) readPartition(ctx context.Context, symbol, tf string, dayStart, from, to int64) ([]candle.Candle, error) {
	key := PartitionPath(tf, symbol, dayStart)
	obj, ok, err := r.open(ctx, key)
	if err != nil || !ok {
		return nil, err
	}
	defer obj.Close()
	f, err := parquet.OpenFile(obj, obj.size, parquet.SkipMagicBytes(true), parquet.SkipPageIndex(true),
		parquet.SkipBloomFilters(true), parquet.ReadBufferSize(readBuffer))
	if err != nil {
		return nil, fmt.Errorf("s3parquet: %s: %w: %w", key, errCorrupt, err)
	}
	idx := make([]int, len(candleColumns))
	for i, name := range candleColumns {
		leaf, ok := f.Schema().Lookup(name)
		if !ok {
			return nil, fmt.Errorf("s3parquet: %s: %w: no column %s", key, errCorrupt, name)
		}
		idx[i] = leaf.ColumnIndex
	}
	var out []candle.Candle
	meta := f.Metadata()
	for g, rg := range f.RowGroups() {
		if g < len(meta.RowGroups) && !overlaps(meta.RowGroups[g].Columns[idx[0]].MetaData.Statistics, from, to) {
			continue
		}
		cs := make([]candle.Candle, rg.NumRows())
		for i := range cs {
			cs[i].Symbol, cs[i].Timeframe = symbol, tf
		}
		for ci, col := range idx {
			err := readColumn(rg.ColumnChunks()[col], func(i int, v parquet.Value) {
				if i >= len(cs) {
					return
				}
				c := &cs[i]
				switch ci {
				case 0:
					c.OpenTime = v.Int64()
				case 1:
					c.CloseTime = v.Int64()
				case 2:
					c.Open = dec128(fixed16(v))
				case 3:
					c.High = dec128(fixed16(v))
				case 4:
					c.Low = dec128(fixed16(v))
				case 5:
					c.Close = dec128(fixed16(v))
				case 6:
					c.Volume = dec128(fixed16(v))
				case 7:
					c.QuoteVolume = dec128(fixed16(v))
				case 8:
					c.Trades = v.Int64()
				case 9:
					c.Gap = v.Boolean()
				}
			})
			if err != nil {
				return nil, fmt.Errorf("s3parquet: %s column %s: %w", key, candleColumns[ci], err)
			}
		}
		for _, c := range cs {
			if c.OpenTime >= from && c.OpenTime < to {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// overlaps reports whether a row group whose open_time statistics are st
// can hold a time in [from, to). Without statistics it must be read.
func overlaps(st format.Statistics, from, to int64) bool {
	if len(st.MinValue) != 8 || len(st.MaxValue) != 8 {
		return true
	}
	lo := int64(binary.LittleEndian.Uint64(st.MinValue))
	hi := int64(binary.LittleEndian.Uint64(st.MaxValue))
	return hi >= from && lo < to
}

func fixed16(v parquet.Value) (b [16]byte) {
	copy(b[:], v.ByteArray())
	return b
}

// readColumn calls fn with the row number and value of every value of one
// column chunk, reading its pages in order.
func readColumn(cc parquet.ColumnChunk, fn func(i int, v parquet.Value)) error {
	pages := cc.Pages()
	defer pages.Close()
	buf := make([]parquet.Value, 1024)
	i := 0
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(buf)
			for _, v := range buf[:n] {
				fn(i, v)
				i++
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return err
			}
		}
		parquet.Release(p)
	}
}
