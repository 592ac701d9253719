package s3parquet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kandle/kandle/decimal"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/kandle/kandle/candle"
)

// Reader reads candles back from the lake for kandle serve. A request for
// [from, to) opens only the objects of that symbol/timeframe/day partitions,
// reads each object's footer, skips the row groups whose open_time
// statistics lie outside the range, and reads only the columns a candle
// needs (not symbol and timeframe, which the partition names). Every read
// is a GET with an explicit byte range computed from the object's size as
// listed (never a suffix range: some S3 emulators answer those wrongly).
type Reader struct {
	cfg    Config
	client *s3.Client // nil for a file:// lake
	loc    location
	dec    *colDecoder

	reads, bytes, lists atomic.Int64
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
	dec, err := newColDecoder(min(max(cfg.Concurrency, 1), runtime.GOMAXPROCS(0)))
	if err != nil {
		return nil, fmt.Errorf("s3parquet: %w", err)
	}
	r := &Reader{cfg: cfg, loc: loc, dec: dec}
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
// bytes they returned (LIST calls not included; see Lists).
func (r *Reader) ReadStats() (reads, bytes int64) { return r.reads.Load(), r.bytes.Load() }

// Lists returns how many LIST calls the reader made.
func (r *Reader) Lists() int64 { return r.lists.Load() }

// ObjectSize returns the size of the partition object of (symbol, tf) that
// holds openTime, or 0 when there is none (for measurements).
func (r *Reader) ObjectSize(ctx context.Context, symbol, tf string, openTime int64) (int64, error) {
	ps, err := r.partitions(ctx, symbol, tf, dayOf(openTime), dayOf(openTime))
	if err != nil || len(ps) == 0 {
		return 0, err
	}
	return ps[0].size, nil
}

// Candles returns at most limit candles (limit <= 0: all) of symbol and
// timeframe tf with open_time in [from, to), oldest first, or newest first
// with newestFirst. The series' partitions are listed (one LIST call per
// thousand days, so days without an object cost nothing), visited in that
// direction, and reading stops once limit candles are found, so a page of
// recent history touches only the newest objects.
func (r *Reader) Candles(ctx context.Context, symbol string, tf candle.Timeframe, from, to int64, limit int, newestFirst bool) ([]candle.Candle, error) {
	if to <= from {
		return nil, nil
	}
	parts, err := r.partitions(ctx, symbol, tf.String(), dayOf(from), dayOf(to-1))
	if err != nil {
		return nil, err
	}
	if newestFirst {
		slices.Reverse(parts)
	}
	conc := max(r.cfg.Concurrency, 1)
	// Each object's candles are kept apart and copied once into the
	// answer: appending a month of candles object by object made the
	// slice regrow, which cost more than decoding them.
	var objs [][]candle.Candle
	total := 0
	for start := 0; start < len(parts); start += conc {
		batch := parts[start:min(start+conc, len(parts))]
		res := make([][]candle.Candle, len(batch))
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, p := range batch {
			wg.Go(func() {
				res[i], errs[i] = r.readPartition(ctx, symbol, tf.String(), p, from, to)
			})
		}
		wg.Wait()
		for i := range batch {
			if errs[i] != nil {
				return nil, errs[i]
			}
			cs := res[i]
			if newestFirst {
				slices.Reverse(cs)
			}
			objs = append(objs, cs)
			if total += len(cs); limit > 0 && total >= limit {
				return concat(objs, limit), nil
			}
		}
	}
	return concat(objs, total), nil
}

// concat returns the first n candles of objs, in order, in one slice.
func concat(objs [][]candle.Candle, n int) []candle.Candle {
	switch {
	case n == 0:
		return nil
	case len(objs) == 1:
		return objs[0][:n]
	}
	out := make([]candle.Candle, 0, n)
	for _, cs := range objs {
		out = append(out, cs[:min(len(cs), n-len(out))]...)
	}
	return out
}

// partition is one existing object of a series.
type partition struct {
	key  string // relative to the lake root
	size int64
}

// partitions lists the objects of (symbol, tf) for UTC days first..last,
// oldest first.
func (r *Reader) partitions(ctx context.Context, symbol, tf string, first, last int64) ([]partition, error) {
	lo, hi := PartitionPath(tf, symbol, first*86_400_000), PartitionPath(tf, symbol, last*86_400_000)
	dir := path.Dir(path.Dir(path.Dir(path.Dir(lo)))) // timeframe=…/symbol=…
	var out []partition
	if r.client == nil {
		root := filepath.Join(r.loc.dir, filepath.FromSlash(dir))
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != ObjectName {
				return nil
			}
			rel, err := filepath.Rel(r.loc.dir, p)
			if err != nil {
				return err
			}
			if key := filepath.ToSlash(rel); key >= lo && key <= hi {
				info, err := d.Info()
				if err != nil {
					return err
				}
				out = append(out, partition{key, info.Size()})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("s3parquet: list %s: %w", root, err)
		}
		slices.SortFunc(out, func(a, b partition) int { return strings.Compare(a.key, b.key) })
		return out, nil
	}
	st := &s3Store{client: r.client, bucket: r.loc.bucket, prefix: r.loc.prefix}
	full := st.key("")
	// Keys sort by date (zero-padded year, month, day): list from the
	// first day on and stop after the last.
	in := &s3.ListObjectsV2Input{Bucket: aws.String(st.bucket), Prefix: aws.String(st.key(dir) + "/"),
		StartAfter: aws.String(st.key(path.Dir(lo)))}
	p := s3.NewListObjectsV2Paginator(r.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3parquet: list %s: %w", st.where(dir), err)
		}
		r.lists.Add(1)
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), full)
			if key > hi {
				return out, nil
			}
			if key >= lo && path.Base(key) == ObjectName {
				out = append(out, partition{key, aws.ToInt64(o.Size)})
			}
		}
	}
	return out, nil
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

// open opens the object of partition p (its size comes from the listing).
func (r *Reader) open(ctx context.Context, p partition) (*object, error) {
	if r.client == nil {
		name := (&fileStore{dir: r.loc.dir}).where(p.key)
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("s3parquet: open %s: %w", name, err)
		}
		return &object{ReaderAt: &countingReaderAt{r: f, reader: r}, size: p.size, close: func() { f.Close() }}, nil
	}
	st := &s3Store{client: r.client, bucket: r.loc.bucket, prefix: r.loc.prefix}
	return &object{ReaderAt: &rangeReaderAt{ctx: ctx, r: r, bucket: st.bucket, key: st.key(p.key), where: st.where(p.key), size: p.size}, size: p.size}, nil
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
var candleColumns = []string{"open_time", "close_time", "open", "high", "low", "close", "volume", "quote_volume", "trades", "gap",
	"taker_buy_base_volume", "taker_buy_quote_volume", "first_trade_id", "last_trade_id", "rev"}

// firstOptionalColumn is the first of candleColumns that files written
// before taker volumes and trade ids lack (files written before revisions
// lack rev, the last: their candles are rev 0).
const firstOptionalColumn = 10

// readPartition returns the candles of one partition object with open_time
// in [from, to), oldest first, read by the column reader (colread.go): one
// ranged read of the object's tail (its footer and, for a day of 1m
// candles, the whole object), then at most one per row group for the
// columns a candle needs. symbol and timeframe are the partition's.
func (r *Reader) readPartition(ctx context.Context, symbol, tf string, p partition, from, to int64) ([]candle.Candle, error) {
	obj, err := r.open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	get := func(off, n int64) ([]byte, error) {
		b := make([]byte, n)
		if _, err := obj.ReadAt(b, off); err != nil && !(errors.Is(err, io.EOF) && off+n == obj.size) {
			return nil, err
		}
		return b, nil
	}
	cs, err := r.dec.read(get, obj.size, readRange{from: from, to: to})
	if errors.Is(err, errLayout) {
		return r.readPartitionGeneric(ctx, symbol, tf, p, from, to)
	}
	if err != nil {
		return nil, fmt.Errorf("s3parquet: %s: %w", p.key, err)
	}
	for i := range cs {
		cs[i].Symbol, cs[i].Timeframe = symbol, tf
	}
	return cs, nil
}

// readPartitionGeneric is readPartition with parquet-go's reader, for a
// file whose layout the column reader does not decode.
func (r *Reader) readPartitionGeneric(ctx context.Context, symbol, tf string, p partition, from, to int64) ([]candle.Candle, error) {
	key := p.key
	obj, err := r.open(ctx, p)
	if err != nil {
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
		switch {
		case ok:
			idx[i] = leaf.ColumnIndex
		case i >= firstOptionalColumn: // a file from before these columns
			idx[i] = -1
		default:
			return nil, fmt.Errorf("s3parquet: %s: %w: no column %s", key, errCorrupt, name)
		}
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
		var badSum error
		takerBase := make([][]byte, len(cs)) // column texts: "" when a candle has none
		takerQuote := make([][]byte, len(cs))
		for ci, col := range idx {
			if col < 0 {
				continue
			}
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
					c.Volume, badSum = volumeOf(v, badSum)
				case 7:
					c.QuoteVolume, badSum = volumeOf(v, badSum)
				case 8:
					c.Trades = v.Int64()
				case 9:
					c.Gap = v.Boolean()
				case 10:
					takerBase[i] = bytes.Clone(v.ByteArray())
				case 11:
					takerQuote[i] = bytes.Clone(v.ByteArray())
				case 12:
					c.FirstTradeID = string(v.ByteArray())
				case 13:
					c.LastTradeID = string(v.ByteArray())
				case 14:
					if r := v.Int64(); r < 0 || r > math.MaxUint32 {
						badSum = fmt.Errorf("rev %d", r)
					} else {
						c.Rev = uint32(r)
					}
				}
			})
			if err == nil && badSum != nil {
				err = fmt.Errorf("%w: %w", errCorrupt, badSum)
			}
			if err != nil {
				return nil, fmt.Errorf("s3parquet: %s column %s: %w", key, candleColumns[ci], err)
			}
		}
		for i := range cs {
			if len(takerBase[i]) > 0 || len(takerQuote[i]) > 0 {
				if err := setTaker(&cs[i], takerBase[i], takerQuote[i]); err != nil {
					return nil, fmt.Errorf("s3parquet: %s: %w", key, err)
				}
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

// volumeOf reads a volume column value: exact decimal text (the current
// layout) or DECIMAL(38,18) (files written before exact wide volumes). A
// value that does not parse sets the returned error (the first one wins).
func volumeOf(v parquet.Value, bad error) (decimal.Sum, error) {
	if v.Kind() == parquet.FixedLenByteArray {
		return decimal.SumOf(dec128(fixed16(v))), bad
	}
	s, err := decimal.ParseSum(v.ByteArray())
	if err != nil && bad == nil {
		bad = fmt.Errorf("volume %q: %w", v.ByteArray(), err)
	}
	return s, bad
}
