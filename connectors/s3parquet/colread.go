package s3parquet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// The column reader: the counterpart of the column writer (encode.go). It
// reads a lake object's footer, picks the row groups whose open_time
// statistics meet the requested range, reads only the column chunks a
// candle needs, and decodes each column's pages straight into the candles'
// fields: int64s, the 16-byte decimals and the volumes' exact text, with
// no float on the way and no generic row in between. open_time is decoded
// first; in a file sorted by it (every file kandle writes) the rows outside
// the range are then never materialised, and the pages that hold only such
// rows are not decompressed.
//
// It reads what kandle's writers have produced: the column writer's files
// (data pages v1, zstd, PLAIN and dictionary-encoded strings) and the files
// parquet-go's generic writer made for the sink before it (data pages v2,
// every codec that writer was given: zstd, snappy or none), in each of the
// layouts the package doc lists (volumes as DECIMAL(38,18), without taker
// volumes and trade ids, without rev). A file outside that (nested or
// optional columns, another encoding or codec) gives an error wrapping
// errLayout, and the callers read it with parquet-go's generic reader
// instead; a file that breaks the format gives an error wrapping
// errCorrupt. Bad input never panics (FuzzColumnReader).

// errLayout marks a Parquet file whose layout the column reader does not
// decode (see above); parquet-go's reader may still read it.
var errLayout = errors.New("a parquet layout the column reader does not decode")

// Parquet enums the reader meets beyond those the writer writes.
const (
	encPlainDictionary = 2
	encDeltaLength     = 6 // DELTA_LENGTH_BYTE_ARRAY: parquet-go's strings
	codecNone          = 0
	codecSnappy        = 1
	pageDataV2         = 3
	typeInt32          = 1
	repRequired        = 0
)

// colDecoder reads lake objects column by column; safe for concurrent use.
type colDecoder struct {
	zstd *zstd.Decoder
}

// maxPageBytes bounds a page's size after decompression, so that a corrupt
// header cannot make the reader allocate much (the writer's pages hold at
// most pageBytes of values; parquet-go's at most a few MiB).
const maxPageBytes = 64 << 20

// newColDecoder returns a decoder that decompresses up to concurrency
// pages at once.
func newColDecoder(concurrency int) (*colDecoder, error) {
	z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(max(1, concurrency)), zstd.WithDecoderMaxMemory(maxPageBytes),
		zstd.IgnoreChecksum(true))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &colDecoder{zstd: z}, nil
}

func (d *colDecoder) Close() { d.zstd.Close() }

// leaf is one column of the file's schema.
type leaf struct {
	name     string
	typ      int32
	typeLen  int32
	required bool
}

// chunkInfo is what the footer says about one column chunk.
type chunkInfo struct {
	typ        int32
	codec      int32
	numValues  int64
	dataOffset int64
	dictOffset int64 // -1: none
	compressed int64
	min, max   []byte // the statistics' min_value/max_value (or the older min/max)
	path       string
}

func (c *chunkInfo) start() int64 {
	if c.dictOffset >= 0 && c.dictOffset < c.dataOffset {
		return c.dictOffset
	}
	return c.dataOffset
}

// fileMeta is the part of a footer the reader uses.
type fileMeta struct {
	leaves    []leaf
	groups    []groupInfo
	createdBy string
}

type groupInfo struct {
	rows   int64
	chunks []chunkInfo
}

// parseFooter reads a FileMetaData.
func parseFooter(b []byte) (*fileMeta, error) {
	r := &thriftReader{b: b}
	m := &fileMeta{}
	nested := false
	r.fields(func(id int16, typ byte) {
		switch id {
		case 2: // schema
			_, n := r.list(typ)
			for i := range n {
				var e leaf
				children := int32(0)
				e.required = true
				r.fields(func(id int16, typ byte) {
					switch id {
					case 1:
						e.typ = r.int32(typ)
					case 2:
						e.typeLen = r.int32(typ)
					case 3:
						e.required = r.int32(typ) == repRequired
					case 4:
						e.name = string(r.bin(typ))
					case 5:
						children = r.int32(typ)
					default:
						r.skip(typ)
					}
				})
				switch {
				case i == 0: // the root
				case children > 0:
					nested = true
				default:
					m.leaves = append(m.leaves, e)
				}
			}
		case 4: // row_groups
			_, n := r.list(typ)
			for range n {
				var g groupInfo
				r.fields(func(id int16, typ byte) {
					switch id {
					case 1:
						_, n := r.list(typ)
						g.chunks = make([]chunkInfo, 0, n)
						for range n {
							g.chunks = append(g.chunks, parseChunk(r))
						}
					case 3:
						g.rows = r.int(typ)
					default:
						r.skip(typ)
					}
				})
				m.groups = append(m.groups, g)
			}
		case 6:
			m.createdBy = string(r.bin(typ))
		default:
			r.skip(typ)
		}
	})
	if r.err != nil {
		return nil, fmt.Errorf("%w: footer: %w", errCorrupt, r.err)
	}
	if nested {
		return nil, fmt.Errorf("%w: nested columns", errLayout)
	}
	return m, nil
}

// parseChunk reads a ColumnChunk.
func parseChunk(r *thriftReader) chunkInfo {
	c := chunkInfo{dictOffset: -1, dataOffset: -1}
	r.fields(func(id int16, typ byte) {
		if id != 3 { // meta_data; the rest (file_path, indexes) is not used
			r.skip(typ)
			return
		}
		r.fields(func(id int16, typ byte) {
			switch id {
			case 1:
				c.typ = r.int32(typ)
			case 3:
				_, n := r.list(typ)
				var p []string
				for range n {
					p = append(p, string(r.bin(tBinary)))
				}
				c.path = strings.Join(p, ".")
			case 4:
				c.codec = r.int32(typ)
			case 5:
				c.numValues = r.int(typ)
			case 7:
				c.compressed = r.int(typ)
			case 9:
				c.dataOffset = r.int(typ)
			case 11:
				c.dictOffset = r.int(typ)
			case 12: // statistics
				var oldMin, oldMax []byte
				r.fields(func(id int16, typ byte) {
					switch id {
					case 1:
						oldMax = r.bin(typ)
					case 2:
						oldMin = r.bin(typ)
					case 5:
						c.max = r.bin(typ)
					case 6:
						c.min = r.bin(typ)
					default:
						r.skip(typ)
					}
				})
				if c.min == nil && c.max == nil {
					c.min, c.max = oldMin, oldMax
				}
			default:
				r.skip(typ)
			}
		})
	})
	return c
}

// Candle fields by the reader's own numbering: the columns it reads, in
// the writer's schema order.
var readColumns = [numColumns]struct {
	typ      int32 // physical type (volumes may also be FLBA(16): the first layout)
	optional bool  // files of earlier layouts lack it
}{
	colSymbol: {typeByteArray, false}, colTimeframe: {typeByteArray, false},
	colOpenTime: {typeInt64, false}, colCloseTime: {typeInt64, false},
	colOpen: {typeFLBA, false}, colHigh: {typeFLBA, false}, colLow: {typeFLBA, false}, colClose: {typeFLBA, false},
	colVolume: {typeByteArray, false}, colQuoteVolume: {typeByteArray, false},
	colTrades: {typeInt64, false}, colGap: {typeBoolean, false},
	colTakerBase: {typeByteArray, true}, colTakerQuote: {typeByteArray, true},
	colFirstID: {typeByteArray, true}, colLastID: {typeByteArray, true},
	colRev: {typeInt64, true},
}

// layout maps the reader's columns to the file's leaves (-1: absent).
func (m *fileMeta) layout() ([numColumns]int, error) {
	var at [numColumns]int
	for col := range at {
		at[col] = -1
	}
	for i, l := range m.leaves {
		col := slices.Index(columnNames[:], l.name)
		if col < 0 {
			continue // a column kandle does not read
		}
		want := readColumns[col].typ
		ok := l.typ == want && (want != typeFLBA || l.typeLen == 16)
		if (col == colVolume || col == colQuoteVolume) && l.typ == typeFLBA && l.typeLen == 16 {
			ok = true // volumes as DECIMAL(38,18)
		}
		if !ok {
			return at, fmt.Errorf("%w: column %s has physical type %d (length %d)", errLayout, l.name, l.typ, l.typeLen)
		}
		if !l.required {
			return at, fmt.Errorf("%w: column %s is not REQUIRED", errLayout, l.name)
		}
		at[col] = i
	}
	for col, i := range at {
		if i < 0 && !readColumns[col].optional {
			return at, fmt.Errorf("%w: no column %s", errCorrupt, columnNames[col])
		}
	}
	if (at[colTakerBase] < 0) != (at[colTakerQuote] < 0) {
		return at, fmt.Errorf("%w: one taker volume column without the other", errCorrupt)
	}
	rows := int64(0)
	for g := range m.groups {
		if r := m.groups[g].rows; r < 0 || r > maxObjectRows-rows {
			return at, fmt.Errorf("%w: more than %d rows", errLayout, maxObjectRows)
		}
		rows += m.groups[g].rows
		if len(m.groups[g].chunks) != len(m.leaves) {
			return at, fmt.Errorf("%w: row group %d has %d column chunks for %d columns", errCorrupt, g, len(m.groups[g].chunks), len(m.leaves))
		}
		for col, i := range at {
			if i < 0 {
				continue
			}
			c := &m.groups[g].chunks[i]
			if c.path != columnNames[col] || c.typ != m.leaves[i].typ {
				return at, fmt.Errorf("%w: row group %d: column chunk %d is %q of type %d, want %s", errCorrupt, g, i, c.path, c.typ, columnNames[col])
			}
			if c.numValues != m.groups[g].rows || c.rows() < 0 {
				return at, fmt.Errorf("%w: row group %d: column %s holds %d values for %d rows", errCorrupt, g, columnNames[col], c.numValues, m.groups[g].rows)
			}
		}
	}
	return at, nil
}

func (c *chunkInfo) rows() int64 { return c.numValues }

// maxObjectRows bounds the rows of a file the column reader reads (a
// lake object is a day of one series: 86,400 rows of 1s candles), so that
// a corrupt footer cannot make it allocate much.
const maxObjectRows = 1 << 20

// source gives the bytes [off, off+n) of an object.
type source func(off, n int64) ([]byte, error)

// The first read of an object is its whole self up to wholeBytes (a day of
// 1m candles: one request), else its last tailBytes (the footer, usually
// with the last columns' data). Then the chunks the request needs are read,
// one request per run of adjacent row groups, less what the tail holds.
const (
	wholeBytes = 64 << 10
	tailBytes  = 16 << 10
)

// gapBytes: two row groups' chunks this close are read in one request (the
// bytes between are the next group's symbol and timeframe chunks).
const gapBytes = 4 << 10

// readRange is a request: candles with open_time in [from, to); series
// says whether symbol and timeframe are read from the file (otherwise the
// caller sets them).
type readRange struct {
	from, to int64
	series   bool
}

// read returns the candles of the object of size bytes that get reads,
// in file order, with open_time in rr's range.
func (d *colDecoder) read(get source, size int64, rr readRange) ([]candle.Candle, error) {
	if size < 12 {
		return nil, fmt.Errorf("%w: %d bytes", errCorrupt, size)
	}
	tailOff := size - tailBytes
	if size <= wholeBytes {
		tailOff = 0
	}
	tailOff = max(0, tailOff)
	tail, err := get(tailOff, size-tailOff)
	if err != nil {
		return nil, err
	}
	if int64(len(tail)) != size-tailOff {
		return nil, fmt.Errorf("%w: read %d bytes of the last %d", errCorrupt, len(tail), size-tailOff)
	}
	if !bytes.Equal(tail[len(tail)-4:], []byte("PAR1")) {
		return nil, fmt.Errorf("%w: no PAR1 at the end", errCorrupt)
	}
	flen := int64(binary.LittleEndian.Uint32(tail[len(tail)-8:]))
	if flen > size-12 {
		return nil, fmt.Errorf("%w: footer of %d bytes in a file of %d", errCorrupt, flen, size)
	}
	var footer []byte
	if fo := size - 8 - flen; fo >= tailOff {
		footer = tail[fo-tailOff : len(tail)-8]
	} else if footer, err = get(fo, flen); err != nil {
		return nil, err
	}
	m, err := parseFooter(footer)
	if err != nil {
		return nil, err
	}
	at, err := m.layout()
	if err != nil {
		return nil, err
	}
	// The columns to read.
	var cols []int
	var fixed [numColumns][]byte // constant symbol/timeframe from kandle's statistics
	for col, i := range at {
		if i < 0 {
			continue
		}
		if col == colSymbol || col == colTimeframe {
			if !rr.series {
				continue
			}
			if len(m.groups) == 0 {
				continue
			}
			if c := &m.groups[0].chunks[i]; m.createdBy == "kandle" && c.min != nil && bytes.Equal(c.min, c.max) && m.constant(i) {
				fixed[col] = c.min // every row group says the same one value
				continue
			}
		}
		cols = append(cols, col)
	}
	// The row groups to read, and the spans of the file that hold their chunks.
	type group struct {
		g      int
		lo, hi int64 // the chunks of cols
		span   int
	}
	var sel []group
	type span struct {
		lo, hi int64
		buf    []byte
	}
	var spans []span
	for g := range m.groups {
		grp := &m.groups[g]
		if !overlapsStats(&grp.chunks[at[colOpenTime]], rr.from, rr.to) || grp.rows == 0 {
			continue
		}
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, col := range cols {
			c := &grp.chunks[at[col]]
			if c.start() < 4 || c.compressed <= 0 || c.start() > size-8-flen-c.compressed {
				return nil, fmt.Errorf("%w: row group %d: column %s at %d+%d outside the file", errCorrupt, g, columnNames[col], c.start(), c.compressed)
			}
			lo, hi = min(lo, c.start()), max(hi, c.start()+c.compressed)
		}
		if n := len(spans); n > 0 && lo >= spans[n-1].hi && lo-spans[n-1].hi <= gapBytes {
			spans[n-1].hi = max(spans[n-1].hi, hi)
		} else {
			spans = append(spans, span{lo: lo, hi: hi})
		}
		sel = append(sel, group{g: g, lo: lo, hi: hi, span: len(spans) - 1})
	}
	for i := range spans {
		sp := &spans[i]
		switch lo, hi := sp.lo, sp.hi; {
		case lo >= tailOff:
			sp.buf = tail[lo-tailOff : hi-tailOff]
		case hi <= tailOff:
			if sp.buf, err = get(lo, hi-lo); err != nil {
				return nil, err
			}
		default:
			head, err := get(lo, tailOff-lo)
			if err != nil {
				return nil, err
			}
			sp.buf = append(head[:len(head):len(head)], tail[:hi-tailOff]...)
		}
		if int64(len(sp.buf)) != sp.hi-sp.lo {
			return nil, fmt.Errorf("%w: read %d bytes of %d", errCorrupt, len(sp.buf), sp.hi-sp.lo)
		}
	}
	var out []candle.Candle
	st := &pageState{d: d}
	for _, sg := range sel {
		g, grp, sp := sg.g, &m.groups[sg.g], &spans[sg.span]
		chunk := func(col int) (*chunkInfo, []byte) {
			c := &grp.chunks[at[col]]
			return c, sp.buf[c.start()-sp.lo : c.start()-sp.lo+c.compressed]
		}
		n := int(grp.rows)
		// open_time first: it picks the rows.
		times := make([]int64, n)
		c, b := chunk(colOpenTime)
		if err := st.column(c, b, 0, n, func(p *page, i0 int) error { return p.int64s(times[i0:]) }); err != nil {
			return nil, fmt.Errorf("%w: row group %d: column open_time: %w", errCorrupt, g, err)
		}
		first, last := 0, n // rows [first, last) are in range when sorted
		sorted := slices.IsSorted(times)
		if sorted {
			first, _ = slices.BinarySearch(times, rr.from)
			last, _ = slices.BinarySearch(times, rr.to)
		}
		if first >= last {
			continue
		}
		cs := make([]candle.Candle, last-first)
		for i := range cs {
			cs[i].OpenTime = times[first+i]
		}
		for col := range fixed {
			if fixed[col] != nil {
				s := string(fixed[col])
				for i := range cs {
					setString(col, &cs[i], s)
				}
			}
		}
		for _, col := range cols {
			if col == colOpenTime {
				continue
			}
			c, b := chunk(col)
			err := st.column(c, b, first, last, func(p *page, i0 int) error { return p.fill(col, cs, i0-first) })
			if err != nil {
				return nil, fmt.Errorf("%w: row group %d: column %s: %w", errCorrupt, g, columnNames[col], err)
			}
		}
		if !sorted {
			cs = slices.DeleteFunc(cs, func(c candle.Candle) bool { return c.OpenTime < rr.from || c.OpenTime >= rr.to })
		}
		if out == nil {
			out = cs
		} else {
			out = append(out, cs...)
		}
	}
	return out, nil
}

// constant reports whether every row group's statistics of leaf i say one
// and the same value.
func (m *fileMeta) constant(i int) bool {
	v := m.groups[0].chunks[i].min
	for g := range m.groups {
		c := &m.groups[g].chunks[i]
		if !bytes.Equal(c.min, v) || !bytes.Equal(c.max, v) {
			return false
		}
	}
	return true
}

// overlapsStats reports whether an open_time chunk whose statistics are c's
// can hold a time in [from, to). Without statistics it must be read.
func overlapsStats(c *chunkInfo, from, to int64) bool {
	if len(c.min) != 8 || len(c.max) != 8 {
		return true
	}
	lo := int64(binary.LittleEndian.Uint64(c.min))
	hi := int64(binary.LittleEndian.Uint64(c.max))
	return hi >= from && lo < to
}

// pageState holds one read's decompression buffers.
type pageState struct {
	d          *colDecoder
	data, dict []byte
	page       page
	dictVals   [][]byte
	strs       [][]byte
	idx        []uint32
}

// page is one data page's values, decompressed.
type page struct {
	typ    int32
	n      int
	values []byte
	// dictionary-encoded pages: the indices, resolved through dict
	idx  []uint32
	dict [][]byte
	strs [][]byte // DELTA_LENGTH_BYTE_ARRAY pages: the values
}

// pageHeader is a PageHeader's fields the reader uses.
type pageHeader struct {
	typ                int32
	uncompressed, size int32
	numValues          int32
	encoding           int32
	defBytes, repBytes int32
	compressed         bool // data page v2: are the values compressed
	sawData, sawDataV2 bool
	sawDict            bool
}

func parsePageHeader(b []byte) (pageHeader, int, error) {
	r := &thriftReader{b: b}
	h := pageHeader{compressed: true}
	r.fields(func(id int16, typ byte) {
		switch id {
		case 1:
			h.typ = r.int32(typ)
		case 2:
			h.uncompressed = r.int32(typ)
		case 3:
			h.size = r.int32(typ)
		case 5, 7, 8: // data page, dictionary page, data page v2
			h.sawData, h.sawDict, h.sawDataV2 = id == 5, id == 7, id == 8
			r.fields(func(fid int16, typ byte) {
				switch {
				case fid == 1:
					h.numValues = r.int32(typ)
				case fid == 2 && id != 8, fid == 4 && id == 8:
					h.encoding = r.int32(typ)
				case fid == 5 && id == 8:
					h.defBytes = r.int32(typ)
				case fid == 6 && id == 8:
					h.repBytes = r.int32(typ)
				case fid == 7 && id == 8:
					h.compressed = typ != tBoolFalse
				default:
					r.skip(typ)
				}
			})
		default:
			r.skip(typ)
		}
	})
	if r.err != nil {
		return h, 0, r.err
	}
	if h.size < 0 || h.uncompressed < 0 || h.uncompressed > maxPageBytes || h.numValues < 0 || h.defBytes < 0 || h.repBytes < 0 {
		return h, 0, fmt.Errorf("bad page header (sizes %d/%d, %d values)", h.size, h.uncompressed, h.numValues)
	}
	return h, r.pos, nil
}

// column decodes the pages of one column chunk b, calling fn for each data
// page that holds a row in [first, last) with the page and its first row.
// Pages wholly outside are not decompressed.
func (st *pageState) column(c *chunkInfo, b []byte, first, last int, fn func(p *page, row0 int) error) error {
	switch c.codec {
	case codecNone, codecSnappy, codecZstd:
	default:
		return fmt.Errorf("%w: codec %d", errLayout, c.codec)
	}
	st.dictVals = st.dictVals[:0]
	hasDict := false
	row := 0
	for len(b) > 0 && row < last {
		h, hl, err := parsePageHeader(b)
		if err != nil {
			return err
		}
		b = b[hl:]
		if int(h.size) > len(b) {
			return fmt.Errorf("page of %d bytes, %d left in the chunk", h.size, len(b))
		}
		body := b[:h.size]
		b = b[h.size:]
		switch h.typ {
		case pageDictionary:
			if !h.sawDict || hasDict {
				return errors.New("bad dictionary page")
			}
			if h.encoding != encPlain && h.encoding != encPlainDictionary {
				return fmt.Errorf("%w: dictionary encoding %d", errLayout, h.encoding)
			}
			if c.typ != typeByteArray {
				return fmt.Errorf("%w: dictionary of a column of type %d", errLayout, c.typ)
			}
			dict, err := st.decompress(c.codec, body, int(h.uncompressed), st.dict[:0])
			if err != nil {
				return err
			}
			if c.codec != codecNone {
				st.dict = dict[:0] // kept for the next chunk (never the input's own bytes)
			}
			if st.dictVals, err = splitByteArrays(dict, int(h.numValues), st.dictVals[:0]); err != nil {
				return fmt.Errorf("dictionary: %w", err)
			}
			hasDict = true
		case pageData, pageDataV2:
			if (h.typ == pageData) != h.sawData || (h.typ == pageDataV2) != h.sawDataV2 {
				return errors.New("data page without its header")
			}
			n := int(h.numValues)
			if n > int(c.numValues)-row {
				return fmt.Errorf("pages hold more than the chunk's %d values", c.numValues)
			}
			if row+n <= first {
				row += n
				continue
			}
			if h.typ == pageDataV2 && h.defBytes+h.repBytes != 0 {
				return fmt.Errorf("%w: levels in a page of a REQUIRED column", errLayout)
			}
			vals := body
			if h.typ == pageData || h.compressed {
				if vals, err = st.decompress(c.codec, body, int(h.uncompressed), st.data[:0]); err != nil {
					return err
				}
				if c.codec != codecNone {
					st.data = vals[:0] // kept for the next page (never the input's own bytes)
				}
			}
			p := &st.page
			*p = page{typ: c.typ, n: n}
			switch h.encoding {
			case encPlain:
				p.values = vals
			case encRLEDictionary, encPlainDictionary:
				if !hasDict {
					return errors.New("dictionary-encoded page without a dictionary")
				}
				if st.idx, err = decodeIndices(vals, n, len(st.dictVals), st.idx[:0]); err != nil {
					return err
				}
				p.idx, p.dict = st.idx, st.dictVals
			case encDeltaLength:
				if c.typ != typeByteArray {
					return fmt.Errorf("DELTA_LENGTH_BYTE_ARRAY page of a column of type %d", c.typ)
				}
				if st.strs, err = deltaLengthByteArrays(vals, n, st.strs[:0]); err != nil {
					return err
				}
				p.strs = st.strs
			default:
				return fmt.Errorf("%w: encoding %d", errLayout, h.encoding)
			}
			if err := fn(p, row); err != nil {
				return err
			}
			row += n
		default:
			// Index pages and others: skipped.
		}
	}
	if row < last {
		return fmt.Errorf("pages hold %d of the chunk's %d values", row, c.numValues)
	}
	return nil
}

// decompress returns src decompressed into dst (want bytes long).
func (st *pageState) decompress(codec int32, src []byte, want int, dst []byte) ([]byte, error) {
	var out []byte
	var err error
	switch codec {
	case codecNone:
		out = src
	case codecSnappy:
		var n int
		if n, err = snappy.DecodedLen(src); err == nil && n != want {
			return nil, fmt.Errorf("snappy page of %d bytes, header says %d", n, want)
		}
		if err == nil {
			out, err = snappy.Decode(slices.Grow(dst[:0], want)[:want], src)
		}
	case codecZstd:
		out, err = st.d.zstd.DecodeAll(src, slices.Grow(dst[:0], want))
	}
	if err != nil {
		return nil, fmt.Errorf("decompress page: %w", err)
	}
	if len(out) != want {
		return nil, fmt.Errorf("page of %d bytes after decompression, header says %d", len(out), want)
	}
	return out, nil
}

// splitByteArrays splits n PLAIN BYTE_ARRAY values.
func splitByteArrays(b []byte, n int, out [][]byte) ([][]byte, error) {
	if n > len(b)/4 {
		return nil, fmt.Errorf("%d values in %d bytes", n, len(b))
	}
	for range n {
		if len(b) < 4 {
			return nil, errors.New("value past the page's end")
		}
		l := binary.LittleEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return nil, errors.New("value past the page's end")
		}
		out = append(out, b[4:4+l:4+l])
		b = b[4+l:]
	}
	return out, nil
}

// decodeIndices reads n dictionary indices (bit width byte, then the RLE /
// bit-packed hybrid runs), each below dictLen.
func decodeIndices(b []byte, n, dictLen int, out []uint32) ([]uint32, error) {
	if n == 0 {
		return out, nil
	}
	if len(b) < 1 {
		return nil, errors.New("no bit width")
	}
	w := int(b[0])
	b = b[1:]
	if w > 32 {
		return nil, fmt.Errorf("bit width %d", w)
	}
	for len(out) < n {
		h, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("bad run header")
		}
		b = b[k:]
		if h&1 == 0 { // RLE run
			cnt := h >> 1
			nb := (w + 7) / 8
			if len(b) < nb || cnt == 0 || cnt > uint64(n-len(out)) {
				return nil, errors.New("bad RLE run")
			}
			var v uint32
			for i := range nb {
				v |= uint32(b[i]) << (8 * i)
			}
			b = b[nb:]
			if int(v) >= dictLen {
				return nil, fmt.Errorf("index %d in a dictionary of %d", v, dictLen)
			}
			for range cnt {
				out = append(out, v)
			}
			continue
		}
		groups := h >> 1 // bit-packed: groups of 8 values
		if groups == 0 || groups > uint64(len(b)) {
			return nil, errors.New("bad bit-packed run")
		}
		nbytes := int(groups) * w
		if nbytes > len(b) {
			return nil, errors.New("bit-packed run past the page's end")
		}
		packed := b[:nbytes]
		b = b[nbytes:]
		var acc uint64
		var have int
		for g := 0; g < int(groups)*8 && len(out) < n; g++ {
			for have < w {
				acc |= uint64(packed[0]) << have
				packed = packed[1:]
				have += 8
			}
			v := uint32(acc & (1<<w - 1))
			acc >>= w
			have -= w
			if int(v) >= dictLen {
				return nil, fmt.Errorf("index %d in a dictionary of %d", v, dictLen)
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// deltaLengthByteArrays splits n DELTA_LENGTH_BYTE_ARRAY values: their
// lengths DELTA_BINARY_PACKED, then their bytes.
func deltaLengthByteArrays(b []byte, n int, out [][]byte) ([][]byte, error) {
	lens, rest, err := deltaBinaryPacked(b, n)
	if err != nil {
		return nil, fmt.Errorf("DELTA_LENGTH_BYTE_ARRAY lengths: %w", err)
	}
	for _, l := range lens {
		if l < 0 || l > int64(len(rest)) {
			return nil, errors.New("DELTA_LENGTH_BYTE_ARRAY value past the page's end")
		}
		out = append(out, rest[:l:l])
		rest = rest[l:]
	}
	return out, nil
}

// deltaBinaryPacked reads n DELTA_BINARY_PACKED values and returns them
// with the bytes after them.
func deltaBinaryPacked(b []byte, n int) ([]int64, []byte, error) {
	r := &thriftReader{b: b} // its varints are the same as this encoding's
	blockSize, miniblocks := r.uvarint(), r.uvarint()
	total, first := r.uvarint(), r.varint()
	if r.err != nil {
		return nil, nil, r.err
	}
	if blockSize == 0 || blockSize%128 != 0 || blockSize > 1<<20 || miniblocks == 0 || blockSize%miniblocks != 0 || (blockSize/miniblocks)%32 != 0 {
		return nil, nil, fmt.Errorf("blocks of %d values in %d miniblocks", blockSize, miniblocks)
	}
	if total != uint64(n) {
		return nil, nil, fmt.Errorf("%d values, the page says %d", total, n)
	}
	perMini := int(blockSize / miniblocks)
	out := make([]int64, 0, n)
	if n > 0 {
		out = append(out, first)
	}
	prev := first
	for len(out) < n {
		minDelta := r.varint()
		if r.err != nil || uint64(len(b)-r.pos) < miniblocks {
			return nil, nil, errors.New("block header past the page's end")
		}
		widths := b[r.pos : r.pos+int(miniblocks)]
		r.pos += int(miniblocks)
		for _, w := range widths {
			if len(out) >= n {
				break
			}
			if w > 64 {
				return nil, nil, fmt.Errorf("bit width %d", w)
			}
			nb := perMini * int(w) / 8
			if len(b)-r.pos < nb {
				return nil, nil, errors.New("miniblock past the page's end")
			}
			packed := b[r.pos : r.pos+nb]
			r.pos += nb
			var acc uint64
			have := 0
			for k := 0; k < perMini && len(out) < n; k++ {
				var v uint64
				got := 0
				for got < int(w) {
					if have == 0 {
						acc, have = uint64(packed[0]), 8
						packed = packed[1:]
					}
					take := min(have, int(w)-got)
					v |= (acc & (1<<take - 1)) << got
					acc >>= take
					have -= take
					got += take
				}
				prev += minDelta + int64(v)
				out = append(out, prev)
			}
		}
	}
	return out, b[r.pos:], nil
}

// int64s decodes the page's n PLAIN INT64 values into out.
func (p *page) int64s(out []int64) error {
	if p.typ != typeInt64 || p.idx != nil {
		return fmt.Errorf("%w: INT64 column not PLAIN", errLayout)
	}
	if len(p.values) < 8*p.n || len(out) < p.n {
		return fmt.Errorf("%d values in %d bytes", p.n, len(p.values))
	}
	for i := range p.n {
		out[i] = int64(binary.LittleEndian.Uint64(p.values[8*i:]))
	}
	return nil
}

// fill sets field col of cs[at+i] from the page's value i, for the i that
// fall inside cs.
func (p *page) fill(col int, cs []candle.Candle, at int) error {
	i0, i1 := max(0, -at), min(p.n, len(cs)-at)
	if i0 >= i1 {
		return nil
	}
	v := p.values
	switch p.typ {
	case typeInt64:
		if p.idx != nil || len(v) < 8*p.n {
			return fmt.Errorf("%d INT64 values in %d bytes", p.n, len(v))
		}
		for i := i0; i < i1; i++ {
			x := int64(binary.LittleEndian.Uint64(v[8*i:]))
			c := &cs[at+i]
			switch col {
			case colCloseTime:
				c.CloseTime = x
			case colTrades:
				c.Trades = x
			case colRev:
				if x < 0 || x > math.MaxUint32 {
					return fmt.Errorf("rev %d", x)
				}
				c.Rev = uint32(x)
			}
		}
	case typeFLBA:
		if p.idx != nil || len(v) < 16*p.n {
			return fmt.Errorf("%d FIXED_LEN_BYTE_ARRAY(16) values in %d bytes", p.n, len(v))
		}
		for i := i0; i < i1; i++ {
			d := decimal.FromRaw(binary.BigEndian.Uint64(v[16*i:]), binary.BigEndian.Uint64(v[16*i+8:]))
			c := &cs[at+i]
			switch col {
			case colOpen:
				c.Open = d
			case colHigh:
				c.High = d
			case colLow:
				c.Low = d
			case colClose:
				c.Close = d
			case colVolume:
				c.Volume = decimal.SumOf(d)
			case colQuoteVolume:
				c.QuoteVolume = decimal.SumOf(d)
			}
		}
	case typeBoolean:
		if p.idx != nil || len(v) < (p.n+7)/8 {
			return fmt.Errorf("%d BOOLEAN values in %d bytes", p.n, len(v))
		}
		for i := i0; i < i1; i++ {
			cs[at+i].Gap = v[i/8]>>(i%8)&1 == 1
		}
	case typeByteArray:
		var prev []byte
		var prevS string
		for i := 0; i < i1; i++ {
			var s []byte
			if p.idx != nil {
				s = p.dict[p.idx[i]]
			} else if p.strs != nil {
				s = p.strs[i]
			} else {
				if len(v) < 4 {
					return errors.New("value past the page's end")
				}
				l := binary.LittleEndian.Uint32(v)
				if uint64(l) > uint64(len(v)-4) {
					return errors.New("value past the page's end")
				}
				s, v = v[4:4+l], v[4+l:]
			}
			if i < i0 {
				continue
			}
			c := &cs[at+i]
			if err := setBytes(col, c, s, &prev, &prevS); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: physical type %d", errLayout, p.typ)
	}
	return nil
}

// setBytes sets a text column's field of c from its value s. Runs of the
// same string (symbol, timeframe) share one copy.
func setBytes(col int, c *candle.Candle, s []byte, prev *[]byte, prevS *string) error {
	switch col {
	case colSymbol, colTimeframe, colFirstID, colLastID:
		if *prev == nil || !bytes.Equal(s, *prev) {
			*prev, *prevS = s, string(s)
		}
		setString(col, c, *prevS)
	case colVolume, colQuoteVolume:
		v, err := decimal.ParseSum(s)
		if err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
		if col == colVolume {
			c.Volume = v
		} else {
			c.QuoteVolume = v
		}
	case colTakerBase, colTakerQuote:
		// "" when the candle has none; the pair must agree.
		if len(s) == 0 {
			if c.Taker {
				return fmt.Errorf("%w: taker_buy_quote_volume without taker_buy_base_volume", errCorrupt)
			}
			return nil
		}
		v, err := decimal.ParseSum(s)
		if err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
		if col == colTakerBase {
			c.Taker, c.TakerBuyVolume = true, v
		} else if !c.Taker {
			return fmt.Errorf("%w: taker_buy_quote_volume without taker_buy_base_volume", errCorrupt)
		} else {
			c.TakerBuyQuoteVolume = v
		}
	}
	return nil
}

func setString(col int, c *candle.Candle, s string) {
	switch col {
	case colSymbol:
		c.Symbol = s
	case colTimeframe:
		c.Timeframe = s
	case colFirstID:
		c.FirstTradeID = s
	case colLastID:
		c.LastTradeID = s
	}
}

// decodeBytes reads a whole lake object held in memory.
func (d *colDecoder) decodeBytes(data []byte) ([]candle.Candle, error) {
	get := func(off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off+n > int64(len(data)) {
			return nil, fmt.Errorf("%w: bytes %d+%d of %d", errCorrupt, off, n, len(data))
		}
		return data[off : off+n : off+n], nil
	}
	return d.read(get, int64(len(data)), readRange{from: math.MinInt64, to: math.MaxInt64, series: true})
}

// Decode reads a Parquet file written by this package back into candles,
// exactly (decimals included), in file order, with the column reader (or
// parquet-go's row reader for a layout the column reader does not decode).
func Decode(data []byte) ([]candle.Candle, error) {
	d, err := newColDecoder(1)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	cs, err := d.decodeBytes(data)
	if errors.Is(err, errLayout) {
		return decodeGeneric(data)
	}
	return cs, err
}
