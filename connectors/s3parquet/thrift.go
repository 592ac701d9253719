package s3parquet

import (
	"errors"
	"fmt"
)

// thriftReader reads Thrift's compact protocol from b: the footer and the
// page headers of a Parquet file (the counterpart of thriftWriter). It
// never panics on bad input: the first problem is kept in err, after which
// every read returns zero values.
type thriftReader struct {
	b     []byte
	pos   int
	err   error
	depth int
}

var errThrift = errors.New("bad thrift")

func (r *thriftReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d", errThrift, what, r.pos)
	}
	r.pos = len(r.b)
}

func (r *thriftReader) byte1() byte {
	if r.pos >= len(r.b) {
		r.fail("unexpected end")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *thriftReader) uvarint() uint64 {
	var x uint64
	for s := 0; s < 64; s += 7 {
		c := r.byte1()
		if r.err != nil {
			return 0
		}
		x |= uint64(c&0x7f) << s
		if c < 0x80 {
			return x
		}
	}
	r.fail("varint too long")
	return 0
}

func (r *thriftReader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// int reads an integer field of type typ (byte, i16, i32 or i64).
func (r *thriftReader) int(typ byte) int64 {
	switch typ {
	case tByte:
		return int64(int8(r.byte1()))
	case 4, tI32, tI64:
		return r.varint()
	}
	r.fail(fmt.Sprintf("integer field of type %d", typ))
	return 0
}

// int32 reads an integer field that must fit an i32.
func (r *thriftReader) int32(typ byte) int32 {
	v := r.int(typ)
	if v != int64(int32(v)) {
		r.fail("i32 out of range")
		return 0
	}
	return int32(v)
}

// bin reads a binary field (the bytes alias the input).
func (r *thriftReader) bin(typ byte) []byte {
	if typ != tBinary {
		r.fail(fmt.Sprintf("binary field of type %d", typ))
		return nil
	}
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.pos) {
		r.fail("binary longer than its input")
		return nil
	}
	v := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return v
}

// list reads a list header of a field of type typ: the elements' type and
// count (bounded by the bytes left, so a bad count cannot allocate much).
func (r *thriftReader) list(typ byte) (elem byte, n int) {
	if typ != tList && typ != 10 {
		r.fail(fmt.Sprintf("list field of type %d", typ))
		return 0, 0
	}
	h := r.byte1()
	elem = h & 0x0f
	size := uint64(h >> 4)
	if size == 15 {
		size = r.uvarint()
	}
	if r.err != nil {
		return 0, 0
	}
	if size > uint64(len(r.b)-r.pos) {
		r.fail("list longer than its input")
		return 0, 0
	}
	return elem, int(size)
}

// fields reads a struct, calling fn with each field's id and type; fn must
// consume the field's value (or call skip). Bool fields carry their value
// in the type: tBoolTrue or tBoolFalse.
func (r *thriftReader) fields(fn func(id int16, typ byte)) {
	if r.depth++; r.depth > 16 {
		r.fail("structs nested too deep")
		return
	}
	defer func() { r.depth-- }()
	var last int16
	for r.err == nil {
		h := r.byte1()
		if h == 0 || r.err != nil {
			return
		}
		typ := h & 0x0f
		if d := h >> 4; d != 0 {
			last += int16(d)
		} else {
			id := r.varint()
			if id != int64(int16(id)) {
				r.fail("field id out of range")
				return
			}
			last = int16(id)
		}
		fn(last, typ)
	}
}

// skip skips a value of type typ.
func (r *thriftReader) skip(typ byte) {
	switch typ {
	case tBoolTrue, tBoolFalse:
	case tByte:
		r.byte1()
	case 4, tI32, tI64:
		r.uvarint()
	case 7: // double
		if len(r.b)-r.pos < 8 {
			r.fail("unexpected end")
			return
		}
		r.pos += 8
	case tBinary:
		r.bin(typ)
	case tList, 10: // list, set
		elem, n := r.list(typ)
		for range n {
			if r.err != nil {
				return
			}
			if elem == tBoolTrue || elem == tBoolFalse {
				r.byte1() // a bool element is one byte
			} else {
				r.skip(elem)
			}
		}
	case 11: // map
		n := r.uvarint()
		if n == 0 || r.err != nil {
			return
		}
		if n > uint64(len(r.b)-r.pos) {
			r.fail("map longer than its input")
			return
		}
		kv := r.byte1()
		for range n {
			if r.err != nil {
				return
			}
			r.skip(kv >> 4)
			r.skip(kv & 0x0f)
		}
	case tStruct:
		if r.depth >= 16 {
			r.fail("structs nested too deep")
			return
		}
		r.fields(func(_ int16, typ byte) { r.skip(typ) })
	default:
		r.fail(fmt.Sprintf("unknown type %d", typ))
	}
}
