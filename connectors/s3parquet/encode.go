package s3parquet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/kandle/kandle/candle"
	"github.com/kandle/kandle/decimal"
)

// The lake's Parquet files are written column by column, straight from the
// candles, by the writer in this file, and read back column by column by
// the reader in colread.go (Decode, Reader; parquet-go's reader only for
// layouts kandle never wrote). A file is what the package doc's column
// table says:
//
//   - "PAR1", then per row group (row_group_rows rows at most) one column
//     chunk per column in schema order, then the footer (FileMetaData in
//     Thrift's compact protocol), its length and "PAR1".
//   - Every column is REQUIRED, so pages carry no repetition or definition
//     levels. Pages are data pages v1, each zstd-compressed on its own, at
//     most pageBytes of values before compression. A page of at most
//     rawLiteralsBytes keeps its zstd literals raw (no Huffman table).
//   - symbol and timeframe are dictionary encoded: a PLAIN dictionary page
//     (values in order of first appearance), then one data page of
//     RLE_DICTIONARY indices written as RLE runs (one run per file, since
//     an object holds one series). Every other column is PLAIN.
//   - Each column chunk has min/max statistics (Parquet's ordering for its
//     type: signed for integers, timestamps and decimals, unsigned bytes for
//     strings) and the footer declares the type-defined column orders, so
//     readers (the package's own Reader, DuckDB) can skip row groups by
//     open_time.
//
// No page index, no bloom filter, no key/value metadata: an object is a day
// of one series, a few pages per column. The bytes depend only on the
// candles and row_group_rows, so replays converge to the same objects.

// Parquet's enums, as the format's Thrift file numbers them.
const (
	typeBoolean   = 0
	typeInt64     = 2
	typeByteArray = 6
	typeFLBA      = 7

	convUTF8            = 0
	convDecimal         = 5
	convTimestampMillis = 9
	convInt64           = 18

	encPlain         = 0
	encRLE           = 3
	encRLEDictionary = 8

	codecZstd = 6

	pageData       = 0
	pageDictionary = 2
)

// Thrift compact protocol type ids.
const (
	tBoolTrue  = 1
	tBoolFalse = 2
	tByte      = 3
	tI32       = 5
	tI64       = 6
	tBinary    = 8
	tList      = 9
	tStruct    = 12
)

// Columns in schema order.
const (
	colSymbol = iota
	colTimeframe
	colOpenTime
	colCloseTime
	colOpen
	colHigh
	colLow
	colClose
	colVolume
	colQuoteVolume
	colTrades
	colGap
	// Text columns added after the first layout, "" when the candle has
	// none: taker buy base and quote volume (exact decimal text, like
	// volume), first and last trade id.
	colTakerBase
	colTakerQuote
	colFirstID
	colLastID
	// The candle's revision (0 for the first final), added after the text
	// columns; files without it hold rev 0 only.
	colRev
	numColumns
)

// columnNames are the Parquet names of the columns, in schema order.
var columnNames = [numColumns]string{"symbol", "timeframe", "open_time", "close_time",
	"open", "high", "low", "close", "volume", "quote_volume", "trades", "gap",
	"taker_buy_base_volume", "taker_buy_quote_volume", "first_trade_id", "last_trade_id", "rev"}

// chunkMeta is what the footer says about one column chunk.
type chunkMeta struct {
	dictOffset   int64 // -1: no dictionary page
	dataOffset   int64
	uncompressed int64 // page headers included
	compressed   int64
	min, max     []byte
}

// encoder writes the lake's Parquet files. It holds the zstd encoders the
// pages share and the buffers of the files being built; safe for
// concurrent use.
type encoder struct {
	zstd    *zstd.Encoder
	writers sync.Pool // of *fileWriter
}

// rawLiteralsBytes: pages up to this size (before compression) are
// compressed without entropy coding of their literals. On such a page the
// Huffman table costs about as many bytes as it saves (a 48-row object is
// 0.4 % larger) and building it was a quarter of the page's compression
// time; larger pages (from about 240 rows of a column) keep it, as it
// saves several percent there. See docs/performance-log.md, "Encoding
// beside the uploads".
const rawLiteralsBytes = 1 << 10

// keepBytes: a file writer whose buffers grew past this (a file of more
// than about 8,000 rows) is not kept for the next file.
const keepBytes = 1 << 20

// zstdLevel is the pages' compression level: zstd's fastest, cheaper than
// its default on the small pages of a lake object, with files a few
// percent larger or smaller (see docs/performance-log.md, "The column
// writer").
const zstdLevel = zstd.SpeedFastest

// newEncoder returns an encoder that compresses up to concurrency pages at
// once (more callers wait their turn).
func newEncoder(concurrency int) (*encoder, error) {
	z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstdLevel), zstd.WithEncoderConcurrency(max(1, concurrency)),
		zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	small, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstdLevel), zstd.WithEncoderConcurrency(max(1, concurrency)),
		zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false), zstd.WithNoEntropyCompression(true))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return &encoder{zstd: z, writers: sync.Pool{New: func() any { return &fileWriter{zstd: z, zstdSmall: small} }}}, nil
}

// fileWriter builds one Parquet file in out.
type fileWriter struct {
	zstd      *zstd.Encoder
	zstdSmall *zstd.Encoder // pages of at most rawLiteralsBytes
	out       []byte
	page      []byte   // values of the page being built
	comp      []byte   // a compressed page
	idx       []uint32 // dictionary indices of a column chunk
	hdr       thriftWriter
	groups    [][numColumns]chunkMeta
	rows      []int // rows per row group
}

// encode returns cs (already sorted by open_time) as one Parquet file, in
// row groups of at most rowGroupRows rows.
func (e *encoder) encode(cs []candle.Candle, rowGroupRows int) ([]byte, error) {
	if rowGroupRows <= 0 {
		return nil, fmt.Errorf("encode parquet: row_group_rows is %d, want a positive number", rowGroupRows)
	}
	w := e.writers.Get().(*fileWriter)
	w.out, w.groups, w.rows = w.out[:0], w.groups[:0], w.rows[:0]
	w.out = append(w.out, "PAR1"...)
	for start := 0; start < len(cs); start += rowGroupRows {
		rg := cs[start:min(start+rowGroupRows, len(cs))]
		var metas [numColumns]chunkMeta
		for col := range numColumns {
			m, err := w.chunk(col, rg)
			if err != nil {
				return nil, fmt.Errorf("encode parquet: column %s: %w", columnNames[col], err)
			}
			metas[col] = m
		}
		w.groups = append(w.groups, metas)
		w.rows = append(w.rows, len(rg))
	}
	footer := len(w.out)
	w.out = w.footer(w.out, len(cs))
	w.out = binary.LittleEndian.AppendUint32(w.out, uint32(len(w.out)-footer))
	w.out = append(w.out, "PAR1"...)
	file := bytes.Clone(w.out)
	if cap(w.out)+cap(w.page)+cap(w.comp)+4*cap(w.idx) <= keepBytes {
		e.writers.Put(w)
	}
	return file, nil
}

// chunk writes column col of the row group rs.
func (w *fileWriter) chunk(col int, rs []candle.Candle) (chunkMeta, error) {
	m := chunkMeta{dictOffset: -1, dataOffset: int64(len(w.out))}
	switch col {
	case colSymbol, colTimeframe:
		w.dictChunk(&m, col, rs)
	case colOpenTime, colCloseTime, colTrades, colRev:
		lo, hi := int64At(col, &rs[0]), int64At(col, &rs[0])
		for start := 0; start < len(rs); start += pageBytes / 8 {
			page := rs[start:min(start+pageBytes/8, len(rs))]
			b := w.values(len(page) * 8)
			for i := range page {
				v := int64At(col, &page[i])
				lo, hi = min(lo, v), max(hi, v)
				binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
			}
			w.page1(&m, pageData, len(page), encPlain)
		}
		m.min = binary.LittleEndian.AppendUint64(nil, uint64(lo))
		m.max = binary.LittleEndian.AppendUint64(nil, uint64(hi))
	case colOpen, colHigh, colLow, colClose:
		lo, hi := decimalAt(col, &rs[0]), decimalAt(col, &rs[0])
		for start := 0; start < len(rs); start += pageBytes / 16 {
			page := rs[start:min(start+pageBytes/16, len(rs))]
			b := w.values(len(page) * 16)
			for i := range page {
				v := decimalAt(col, &page[i])
				if v.Cmp(lo) < 0 {
					lo = v
				} else if v.Cmp(hi) > 0 {
					hi = v
				}
				x, y := v.Raw()
				binary.BigEndian.PutUint64(b[16*i:], x)
				binary.BigEndian.PutUint64(b[16*i+8:], y)
			}
			w.page1(&m, pageData, len(page), encPlain)
		}
		l, h := enc128(lo), enc128(hi)
		m.min, m.max = l[:], h[:]
	case colVolume, colQuoteVolume, colTakerBase, colTakerQuote, colFirstID, colLastID:
		var lo, hi []byte
		b, n := w.page[:0], 0
		for i := range rs {
			at := len(b)
			b = appendText(col, &rs[i], append(b, 0, 0, 0, 0))
			v := b[at+4:]
			binary.LittleEndian.PutUint32(b[at:], uint32(len(v)))
			if i == 0 || bytes.Compare(v, lo) < 0 {
				lo = append(lo[:0], v...)
			}
			if i == 0 || bytes.Compare(v, hi) > 0 {
				hi = append(hi[:0], v...)
			}
			if n++; len(b) >= pageBytes || i == len(rs)-1 {
				w.page = b
				w.page1(&m, pageData, n, encPlain)
				b, n = w.page[:0], 0
			}
		}
		m.min, m.max = lo, hi
	case colGap:
		lo, hi := true, false
		for start := 0; start < len(rs); start += pageBytes * 8 {
			page := rs[start:min(start+pageBytes*8, len(rs))]
			b := w.values((len(page) + 7) / 8)
			clear(b)
			for i := range page {
				if page[i].Gap {
					b[i/8] |= 1 << (i % 8)
					hi = true
				} else {
					lo = false
				}
			}
			w.page1(&m, pageData, len(page), encPlain)
		}
		m.min, m.max = []byte{b2u(lo)}, []byte{b2u(hi)}
	default:
		return m, fmt.Errorf("no column %d", col)
	}
	return m, nil
}

// values sets w.page to n bytes for a page's values and returns it.
func (w *fileWriter) values(n int) []byte {
	if cap(w.page) < n {
		w.page = make([]byte, n)
	}
	w.page = w.page[:n]
	return w.page
}

// dictChunk writes a dictionary page of the column's distinct values (in
// order of first appearance) and one data page of their indices as RLE runs.
func (w *fileWriter) dictChunk(m *chunkMeta, col int, rs []candle.Candle) {
	var dict []string
	var index map[string]int // only when the dictionary grows past a few values
	if cap(w.idx) < len(rs) {
		w.idx = make([]uint32, len(rs))
	}
	idx := w.idx[:len(rs)]
	for i := range rs {
		v := stringAt(col, &rs[i])
		if i > 0 && v == stringAt(col, &rs[i-1]) {
			idx[i] = idx[i-1]
			continue
		}
		j := -1
		if index != nil {
			if k, ok := index[v]; ok {
				j = k
			}
		} else {
			for k, d := range dict {
				if d == v {
					j = k
					break
				}
			}
		}
		if j < 0 {
			j = len(dict)
			dict = append(dict, v)
			if index != nil {
				index[v] = j
			} else if len(dict) > 16 {
				index = make(map[string]int, 64)
				for k, d := range dict {
					index[d] = k
				}
			}
		}
		idx[i] = uint32(j)
	}
	lo, hi := dict[0], dict[0]
	for _, d := range dict {
		w.page = binary.LittleEndian.AppendUint32(w.page, uint32(len(d)))
		w.page = append(w.page, d...)
		lo, hi = min(lo, d), max(hi, d)
	}
	m.min, m.max = []byte(lo), []byte(hi)
	m.dictOffset = int64(len(w.out))
	w.page1(m, pageDictionary, len(dict), encPlain)
	m.dataOffset = int64(len(w.out))
	// Indices: the bit width (at least 1, as common writers do for a
	// dictionary of one), then RLE runs of (count<<1, value in
	// ceil(width/8) little-endian bytes).
	width := max(1, bits.Len(uint(len(dict)-1)))
	nb := (width + 7) / 8
	w.page = append(w.page, byte(width))
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && idx[j] == idx[i] {
			j++
		}
		w.page = binary.AppendUvarint(w.page, uint64(j-i)<<1)
		for b := range nb {
			w.page = append(w.page, byte(idx[i]>>(8*b)))
		}
		i = j
	}
	w.page1(m, pageData, len(rs), encRLEDictionary)
}

// page1 compresses w.page and appends it with its header to the file.
func (w *fileWriter) page1(m *chunkMeta, kind int32, n int, enc int32) {
	z := w.zstd
	if len(w.page) <= rawLiteralsBytes {
		z = w.zstdSmall
	}
	w.comp = z.EncodeAll(w.page, w.comp[:0])
	h := &w.hdr
	h.reset(w.out)
	h.i32(1, kind)
	h.i32(2, int32(len(w.page)))
	h.i32(3, int32(len(w.comp)))
	if kind == pageDictionary {
		h.begin(7)
	} else {
		h.begin(5)
	}
	h.i32(1, int32(n))
	h.i32(2, enc)
	if kind == pageData {
		h.i32(3, encRLE) // levels: none (every column is REQUIRED)
		h.i32(4, encRLE)
	}
	h.end()
	h.stop()
	hlen := len(h.b) - len(w.out)
	w.out = append(h.b, w.comp...)
	m.uncompressed += int64(hlen + len(w.page))
	m.compressed += int64(hlen + len(w.comp))
	w.page = w.page[:0]
}

// footer appends the FileMetaData.
func (w *fileWriter) footer(b []byte, numRows int) []byte {
	h := &w.hdr
	h.reset(b)
	h.i32(1, 2) // version
	h.list(2, tStruct, numColumns+1)
	h.elem()
	h.str(4, "row")
	h.i32(5, numColumns)
	h.stop()
	for col := range numColumns {
		h.elem()
		schemaElement(h, col)
		h.stop()
	}
	h.i64(3, int64(numRows))
	h.list(4, tStruct, len(w.groups))
	for g, metas := range w.groups {
		h.elem()
		h.list(1, tStruct, numColumns)
		var total, comp int64
		for col := range numColumns {
			m := &metas[col]
			total += m.uncompressed
			comp += m.compressed
			first := m.dataOffset
			if m.dictOffset >= 0 {
				first = m.dictOffset
			}
			h.elem()
			h.i64(2, first)
			h.begin(3) // ColumnMetaData
			h.i32(1, physicalType(col))
			if m.dictOffset >= 0 {
				h.list(2, tI32, 2)
				h.rawI32(encPlain)
				h.rawI32(encRLEDictionary)
			} else {
				h.list(2, tI32, 1)
				h.rawI32(encPlain)
			}
			h.list(3, tBinary, 1)
			h.rawStr(columnNames[col])
			h.i32(4, codecZstd)
			h.i64(5, int64(w.rows[g]))
			h.i64(6, m.uncompressed)
			h.i64(7, m.compressed)
			h.i64(9, m.dataOffset)
			if m.dictOffset >= 0 {
				h.i64(11, m.dictOffset)
			}
			h.begin(12) // Statistics
			h.i64(3, 0) // null_count
			h.bin(5, m.max)
			h.bin(6, m.min)
			h.end()
			h.end()
			h.stop()
		}
		first := metas[0].dataOffset
		if metas[0].dictOffset >= 0 {
			first = metas[0].dictOffset
		}
		h.i64(2, total)
		h.i64(3, int64(w.rows[g]))
		h.i64(5, first)
		h.i64(6, comp)
		h.i16(7, int16(g))
		h.stop()
	}
	h.str(6, "kandle")
	h.list(7, tStruct, numColumns) // column_orders: TYPE_ORDER for every column
	for range numColumns {
		h.elem()
		h.begin(1)
		h.end()
		h.stop()
	}
	h.stop()
	return h.b
}

func physicalType(col int) int32 {
	switch col {
	case colSymbol, colTimeframe, colVolume, colQuoteVolume, colTakerBase, colTakerQuote, colFirstID, colLastID:
		return typeByteArray
	case colOpenTime, colCloseTime, colTrades, colRev:
		return typeInt64
	case colOpen, colHigh, colLow, colClose:
		return typeFLBA
	default:
		return typeBoolean
	}
}

// schemaElement writes the fields of col's SchemaElement, logical type included.
func schemaElement(h *thriftWriter, col int) {
	h.i32(1, physicalType(col))
	if physicalType(col) == typeFLBA {
		h.i32(2, 16)
	}
	h.i32(3, 0) // REQUIRED
	h.str(4, columnNames[col])
	switch col {
	case colSymbol, colTimeframe, colVolume, colQuoteVolume, colTakerBase, colTakerQuote, colFirstID, colLastID:
		h.i32(6, convUTF8)
		h.begin(10)
		h.begin(1) // STRING
		h.end()
		h.end()
	case colOpenTime, colCloseTime:
		h.i32(6, convTimestampMillis)
		h.begin(10)
		h.begin(8) // TIMESTAMP
		h.boolean(1, true)
		h.begin(2)
		h.begin(1) // MILLIS
		h.end()
		h.end()
		h.end()
		h.end()
	case colOpen, colHigh, colLow, colClose:
		h.i32(6, convDecimal)
		h.i32(7, 18)
		h.i32(8, 38)
		h.begin(10)
		h.begin(5) // DECIMAL
		h.i32(1, 18)
		h.i32(2, 38)
		h.end()
		h.end()
	case colTrades, colRev:
		h.i32(6, convInt64)
		h.begin(10)
		h.begin(10) // INTEGER
		h.byte1(1, 64)
		h.boolean(2, true)
		h.end()
		h.end()
	}
}

func int64At(col int, c *candle.Candle) int64 {
	switch col {
	case colOpenTime:
		return c.OpenTime
	case colCloseTime:
		return c.CloseTime
	case colRev:
		return int64(c.Rev)
	default:
		return c.Trades
	}
}

func decimalAt(col int, c *candle.Candle) decimal.Decimal {
	switch col {
	case colOpen:
		return c.Open
	case colHigh:
		return c.High
	case colLow:
		return c.Low
	default:
		return c.Close
	}
}

// appendText appends the value of a text column: a volume's exact decimal
// text, a taker volume's ("" when the candle has none), a trade id.
func appendText(col int, c *candle.Candle, b []byte) []byte {
	switch col {
	case colVolume:
		return c.Volume.Append(b)
	case colQuoteVolume:
		return c.QuoteVolume.Append(b)
	case colTakerBase, colTakerQuote:
		if !c.Taker {
			return b
		}
		if col == colTakerBase {
			return c.TakerBuyVolume.Append(b)
		}
		return c.TakerBuyQuoteVolume.Append(b)
	case colFirstID:
		return append(b, c.FirstTradeID...)
	}
	return append(b, c.LastTradeID...)
}

func stringAt(col int, c *candle.Candle) string {
	if col == colSymbol {
		return c.Symbol
	}
	return c.Timeframe
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// thriftWriter appends Thrift compact protocol to b. Structs nest with
// begin/end (a struct field) or elem/stop (a list element); a struct's
// fields must come in increasing id order.
type thriftWriter struct {
	b     []byte
	last  int16
	stack []int16
}

func (h *thriftWriter) reset(b []byte) {
	h.b, h.last, h.stack = b, 0, h.stack[:0]
}

func (h *thriftWriter) field(id int16, typ byte) {
	if d := id - h.last; d > 0 && d <= 15 {
		h.b = append(h.b, byte(d)<<4|typ)
	} else {
		h.b = append(h.b, typ)
		h.b = binary.AppendVarint(h.b, int64(id))
	}
	h.last = id
}

func (h *thriftWriter) i32(id int16, v int32) {
	h.field(id, tI32)
	h.b = binary.AppendVarint(h.b, int64(v))
}

func (h *thriftWriter) i16(id int16, v int16) {
	h.field(id, 4)
	h.b = binary.AppendVarint(h.b, int64(v))
}

func (h *thriftWriter) i64(id int16, v int64) {
	h.field(id, tI64)
	h.b = binary.AppendVarint(h.b, v)
}

func (h *thriftWriter) byte1(id int16, v byte) {
	h.field(id, tByte)
	h.b = append(h.b, v)
}

func (h *thriftWriter) boolean(id int16, v bool) {
	if v {
		h.field(id, tBoolTrue)
	} else {
		h.field(id, tBoolFalse)
	}
}

func (h *thriftWriter) bin(id int16, v []byte) {
	h.field(id, tBinary)
	h.rawBin(v)
}

func (h *thriftWriter) str(id int16, v string) {
	h.field(id, tBinary)
	h.rawStr(v)
}

func (h *thriftWriter) rawBin(v []byte) {
	h.b = binary.AppendUvarint(h.b, uint64(len(v)))
	h.b = append(h.b, v...)
}

func (h *thriftWriter) rawStr(v string) {
	h.b = binary.AppendUvarint(h.b, uint64(len(v)))
	h.b = append(h.b, v...)
}

func (h *thriftWriter) rawI32(v int32) { h.b = binary.AppendVarint(h.b, int64(v)) }

// list starts a list field of n elements of type elem.
func (h *thriftWriter) list(id int16, elem byte, n int) {
	h.field(id, tList)
	if n < 15 {
		h.b = append(h.b, byte(n)<<4|elem)
	} else {
		h.b = append(h.b, 0xf0|elem)
		h.b = binary.AppendUvarint(h.b, uint64(n))
	}
}

// begin starts a struct field; end closes it.
func (h *thriftWriter) begin(id int16) {
	h.field(id, tStruct)
	h.elem()
}

func (h *thriftWriter) end() { h.stop() }

// elem starts a struct that is a list element; stop closes it (and the
// top-level struct).
func (h *thriftWriter) elem() {
	h.stack = append(h.stack, h.last)
	h.last = 0
}

func (h *thriftWriter) stop() {
	h.b = append(h.b, 0)
	if n := len(h.stack); n > 0 {
		h.last = h.stack[n-1]
		h.stack = h.stack[:n-1]
	}
}
