package processors

import (
	"encoding/binary"
	"math/bits"
)

// The shape cache: records from one producer spell their members the same
// way, in the same order, with the same spacing; only the values change.
// After the general scanner has validated a flat object (every member value
// a string, number, true, false or null), the decoder remembers its shape:
// for each member the exact bytes between the previous value and this one
// (the "{" or ",", the quoted name, the ":", any white space), the kind of
// its value and the field it fills, and the bytes after the last value.
//
// The next record is first matched against that shape: each run of bytes
// between values must be identical (one masked word compare when it has at
// most 8 bytes) and each value is scanned and validated in full, as the
// general scanner does, but knowing its kind and its field in advance. A
// record that matches is the same sequence of JSON tokens with other
// values, so it is valid JSON exactly when the general scanner says so and
// captures the same spans. Anything else — a different name, order or
// spacing, another kind of value, a nested value, an invalid value, extra
// bytes — makes the match fail, and the record goes through the general
// scanner from its first byte, so rejections and their "near byte N"
// details never depend on the cache.

// maxShape bounds the members of a cached shape; wider objects are always
// scanned by the general scanner.
const maxShape = 16

// shapeMember is one member of a cached shape.
type shapeMember struct {
	word, mask uint64 // pre's bytes (little-endian) and their mask, when len(pre) ≤ 8
	pre        []byte // the bytes from the end of the previous value (or the record's start) to this value
	kind       byte   // kindString (also for kindEsc), kindNumber, kindTrue (true or false) or kindNull
	field      int8   // capture index, -1 when the member fills no field
}

// shape is the cached layout of the last record the general scanner
// accepted as a flat object. n == 0: none.
type shape struct {
	n    int
	m    [maxShape]shapeMember
	tail []byte // the bytes after the last value: white space, "}", white space
	buf  []byte // backing array of pre and tail
}

// shapeRec collects the top-level members while the general scanner runs.
type shapeRec struct {
	n   int
	bad bool // a member the cache cannot hold (nested value, too many members)
	m   [maxShape]struct {
		start, end int
		kind       byte
		field      int8
	}
}

// add records one top-level member whose value is b[start:end].
func (r *shapeRec) add(start, end int, kind byte, node *pathNode) {
	if r.n == maxShape {
		r.bad = true
		return
	}
	switch kind {
	case kindString, kindEsc, kindNumber, kindTrue, kindFalse, kindNull:
	default:
		r.bad = true
		return
	}
	m := &r.m[r.n]
	m.start, m.end, m.kind, m.field = start, end, kind, -1
	switch kind {
	case kindEsc:
		m.kind = kindString
	case kindFalse:
		m.kind = kindTrue
	}
	if node != nil && node.field >= 0 {
		m.field = int8(node.field)
	}
	r.n++
}

// learn makes b's members, recorded in r while the general scanner accepted
// b as an object, the cached shape. A shape r cannot describe clears it.
func (sh *shape) learn(b []byte, r *shapeRec) {
	sh.n = 0
	if r.bad || r.n == 0 {
		return
	}
	sh.buf = sh.buf[:0]
	prev := 0
	for i := range r.n {
		sh.buf = append(sh.buf, b[prev:r.m[i].start]...)
		prev = r.m[i].end
	}
	sh.buf = append(sh.buf, b[prev:]...)
	prev, at := 0, 0
	for i := range r.n {
		rm, m := &r.m[i], &sh.m[i]
		l := rm.start - prev
		m.pre = sh.buf[at : at+l : at+l]
		at += l
		m.kind, m.field = rm.kind, rm.field
		m.word, m.mask = 0, 0
		if l <= 8 {
			var w [8]byte
			copy(w[:], m.pre)
			m.word = binary.LittleEndian.Uint64(w[:])
			m.mask = ^uint64(0) >> ((64 - 8*uint(l)) & 63)
			if l == 0 {
				m.mask = 0
			}
		}
		prev = rm.end
	}
	sh.tail = sh.buf[at:]
	sh.n = r.n
}

// match scans b as the cached shape. It fills caps (which the caller has
// cleared) and reports whether b has exactly that shape with valid values;
// false says nothing about b's validity.
func (sh *shape) match(b []byte, caps *[numFields]span) bool {
	i := 0
	for k := range sh.n {
		m := &sh.m[k]
		l := len(m.pre)
		if l <= 8 && i+8 <= len(b) {
			if binary.LittleEndian.Uint64(b[i:])&m.mask != m.word {
				return false
			}
		} else if len(b)-i < l || string(b[i:i+l]) != string(m.pre) {
			return false
		}
		i += l
		if i >= len(b) {
			return false
		}
		var sp span
		c := b[i]
		switch m.kind {
		case kindString:
			if c != '"' {
				return false
			}
			j := 0
			for p := i + 1; p+8 <= len(b); p += 8 {
				x := binary.LittleEndian.Uint64(b[p:])
				if s := special(x); s != 0 {
					if tz := bits.TrailingZeros64(s); byte(x>>(tz&^7)) == '"' {
						j = p + 1 + tz>>3
					}
					break
				}
			}
			sp.kind = kindString
			if j == 0 {
				var esc, ok bool
				if j, esc, ok = scanStr(b, i); !ok {
					return false
				}
				if esc {
					sp.kind = kindEsc
				}
			}
			sp.start, sp.end = i+1, j-1
			i = j
		case kindNumber:
			j := 0
			if c-'1' < 9 {
				if j = skipDigits(b, i+1); j < len(b) && (b[j] == '.' || b[j]|0x20 == 'e') {
					j = 0
				}
			} else if c != '-' && c != '0' {
				return false
			}
			if j == 0 {
				var ok bool
				if j, ok = scanNum(b, i); !ok {
					return false
				}
			}
			sp = span{i, j, kindNumber}
			i = j
		case kindTrue: // true or false (flags flip from record to record)
			if len(b)-i >= 4 && string(b[i:i+4]) == "true" {
				sp, i = span{i, i + 4, kindTrue}, i+4
			} else if len(b)-i >= 5 && string(b[i:i+5]) == "false" {
				sp, i = span{i, i + 5, kindFalse}, i+5
			} else {
				return false
			}
		case kindNull:
			if len(b)-i < 4 || string(b[i:i+4]) != "null" {
				return false
			}
			sp, i = span{i, i + 4, kindNull}, i+4
		}
		if m.field >= 0 {
			caps[m.field] = sp
		}
	}
	if len(b)-i != len(sh.tail) {
		return false
	}
	if len(sh.tail) == 1 { // "}" with no white space: no call to compare memory
		return b[i] == sh.tail[0]
	}
	return string(b[i:]) == string(sh.tail)
}
