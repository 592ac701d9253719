package processors

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// A small validating JSON scanner. It walks a record once, checks that it is
// well-formed JSON, and records the byte spans of the configured fields
// without allocating. Everything else is skipped (but still validated).

const maxDepth = 64

// Value kinds recorded for a captured field.
const (
	kindNone   byte = 0
	kindString byte = 's' // span excludes the quotes; no escapes inside
	kindEsc    byte = 'e' // string containing backslash escapes
	kindNumber byte = 'n'
	kindTrue   byte = 't'
	kindFalse  byte = 'f'
	kindNull   byte = 'l'
	kindObject byte = '{'
	kindArray  byte = '['
)

type span struct {
	start, end int
	kind       byte
}

// pathLevel is one object level of the field tree: "data.p" becomes
// data → p. first marks the first bytes of its names, so most members that
// are not wanted are dismissed with one table lookup.
type pathLevel struct {
	nodes []pathNode
	short []uint64 // per node: shortKey of its name, 0 when longer than 7 bytes
	first [256]bool
}

// shortKey packs a name of 1 to 7 bytes (little-endian word w, n bytes)
// into one comparable word.
func shortKey(w uint64, n int) uint64 { return w&(1<<(8*uint(n))-1) | uint64(n)<<56 }

type pathNode struct {
	name     string
	word     uint64     // name's bytes, little-endian, when it has at most 8
	field    int        // index into the capture array, -1 for an inner node
	children *pathLevel // nil for a leaf
}

// index fills the first-byte tables of l and its descendants.
func (l *pathLevel) index() {
	l.short = make([]uint64, len(l.nodes))
	for i := range l.nodes {
		n := &l.nodes[i]
		l.first[n.name[0]] = true
		if len(n.name) <= 8 {
			var w [8]byte
			copy(w[:], n.name)
			n.word = binary.LittleEndian.Uint64(w[:])
			if len(n.name) <= 7 {
				l.short[i] = shortKey(n.word, len(n.name))
			}
		}
		if c := l.nodes[i].children; c != nil {
			c.index()
		}
	}
}

// findShort returns the node whose name has shortKey key, or nil.
func (l *pathLevel) findShort(key uint64) *pathNode {
	for k, w := range l.short {
		if w == key {
			return &l.nodes[k]
		}
	}
	return nil
}

// find returns the node named name (which starts at b[start]), or nil.
// Names of up to 8 bytes compare as one word when b has 8 bytes to load.
func (l *pathLevel) find(b []byte, start int, name []byte) *pathNode {
	if len(name) <= 8 && start+8 <= len(b) {
		// (a shift by 64 is 0 in Go, so an 8-byte name keeps every bit)
		w := binary.LittleEndian.Uint64(b[start:]) & (1<<(8*uint(len(name))) - 1)
		for k := range l.nodes {
			if n := &l.nodes[k]; n.word == w && len(n.name) == len(name) {
				return n
			}
		}
		return nil
	}
	for k := range l.nodes {
		if n := &l.nodes[k]; n.name == string(name) {
			return n
		}
	}
	return nil
}

type scanner struct {
	b   []byte
	pos int
	cap *[numFields]span
	rec *shapeRec // records the top-level members for the shape cache
}

func (s *scanner) ws() { s.pos = skipWS(s.b, s.pos) }

// value scans one JSON value. When it is an object and lvl is not nil,
// members named in lvl are captured or descended into.
func (s *scanner) value(lvl *pathLevel, depth int) (span, bool) {
	s.ws()
	if s.pos >= len(s.b) {
		return span{}, false
	}
	start := s.pos
	switch c := s.b[s.pos]; {
	case c == '"':
		esc, ok := s.str()
		if !ok {
			return span{}, false
		}
		k := kindString
		if esc {
			k = kindEsc
		}
		return span{start + 1, s.pos - 1, k}, true
	case c == '{':
		if depth >= maxDepth || !s.object(lvl, depth+1) {
			return span{}, false
		}
		return span{start, s.pos, kindObject}, true
	case c == '[':
		if depth >= maxDepth || !s.array(depth+1) {
			return span{}, false
		}
		return span{start, s.pos, kindArray}, true
	case c == '-' || (c >= '0' && c <= '9'):
		if !s.number() {
			return span{}, false
		}
		return span{start, s.pos, kindNumber}, true
	case c == 't':
		return s.lit("true", kindTrue)
	case c == 'f':
		return s.lit("false", kindFalse)
	case c == 'n':
		return s.lit("null", kindNull)
	}
	return span{}, false
}

func (s *scanner) lit(word string, k byte) (span, bool) {
	if len(s.b)-s.pos < len(word) || string(s.b[s.pos:s.pos+len(word)]) != word {
		return span{}, false
	}
	s.pos += len(word)
	return span{s.pos - len(word), s.pos, k}, true
}

// str scans a string starting at its opening quote; it reports whether the
// string holds escapes.
func (s *scanner) str() (esc, ok bool) {
	s.pos, esc, ok = scanStr(s.b, s.pos)
	return esc, ok
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special flags (in the high bit of each byte) the bytes of x that end a
// plain run of string body: '"', '\\' or a control character. Only the
// lowest flag is exact, which is all scanStr needs.
func special(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	// The three zero-byte tests share one &^x: q, bs and x have the same
	// high bits ('"' and '\\' are below 0x80), and only high bits are kept.
	return ((q - ones) | (bs - ones) | (x - ones*0x20)) &^ x & highs
}

// scanStr scans the string whose opening quote is at q. It returns the
// position after the closing quote, or on failure the position the error is
// reported at (the same positions as a byte-by-byte scan).
func scanStr(b []byte, q int) (end int, esc, ok bool) {
	i := q + 1
	for {
		for i+8 <= len(b) { // eight bytes at a time
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto found
			}
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false, false
		}
	found:
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return q, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return q, false, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return q, false, false
					}
				}
				i += 6
			default:
				return i, false, false
			}
		default: // a control character
			return i, false, false
		}
	}
}

// plainEnd returns the position after the closing quote of a string whose
// body is plain up to i, when eight-byte steps find that quote before any
// other special byte; else 0 (the caller falls back to scanStr).
func plainEnd(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := special(x); m != 0 {
			if tz := bits.TrailingZeros64(m); byte(x>>(tz&^7)) == '"' {
				return i + 1 + tz>>3
			}
			return 0
		}
	}
	return 0
}

// plain marks the bytes a string body may hold without a closer look (an
// immutable table: everything except '"', '\\' and control characters).
var plain = func() (t [256]bool) {
	for i := range t {
		t[i] = i >= 0x20 && i != '"' && i != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number scans -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (s *scanner) number() bool {
	var ok bool
	s.pos, ok = scanNum(s.b, s.pos)
	return ok
}

// scanNum scans the number starting at i. It returns the position after it,
// or on failure the position the error is reported at.
func scanNum(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, false
	}
	if b[i] == '0' {
		i++
	} else {
		j := skipDigits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := skipDigits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

// skipDigits returns the position of the first non-digit at or after i,
// testing eight bytes at a time while it can.
func skipDigits(b []byte, i int) int {
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:]) ^ (ones * '0') // digits become 0..9
		// A byte is flagged when it is ≥ 10 after the xor; only the lowest
		// flag is exact (carries run upwards), which is the one used.
		if m := ((x + ones*0x76) | x) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c-'0' < 10 }

// skipWS returns the position of the first non-space byte at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// object scans an object whose '{' is at s.pos. It is the hot loop of a
// decode: strings, numbers and literals are scanned inline on locals, and
// only nested objects and arrays go through value.
func (s *scanner) object(lvl *pathLevel, depth int) bool {
	b := s.b
	i := skipWS(b, s.pos+1)
	if i < len(b) && b[i] == '}' {
		s.pos = i + 1
		return true
	}
	for {
		i = skipWS(b, i)
		if i >= len(b) || b[i] != '"' {
			s.pos = i
			return false
		}
		nameStart := i + 1
		j, esc, ok := 0, false, true
		var key uint64     // shortKey of a name of up to 7 bytes
		if i+9 <= len(b) { // inlined scanStr for plain names
			x := binary.LittleEndian.Uint64(b[i+1:])
			if m := special(x); m != 0 {
				// The flagged byte is read from x, not reloaded from b.
				if tz := bits.TrailingZeros64(m); byte(x>>(tz&^7)) == '"' && tz > 7 {
					j = i + 2 + tz>>3
					key = shortKey(x, tz>>3)
				}
			} else {
				j = plainEnd(b, i+9)
			}
		}
		if j == 0 {
			if j, esc, ok = scanStr(b, i); !ok {
				s.pos = j
				return false
			}
		}
		name := b[nameStart : j-1]
		i = j
		if i >= len(b) || b[i] != ':' {
			if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
				s.pos = i
				return false
			}
		}
		i = skipWS(b, i+1)
		vs := i // the value's first byte
		var node *pathNode
		if lvl != nil && !esc && len(name) > 0 && lvl.first[name[0]] {
			if key != 0 {
				node = lvl.findShort(key)
			} else {
				node = lvl.find(b, nameStart, name)
			}
		}
		if i >= len(b) {
			s.pos = i
			return false
		}
		var sp span
		switch c := b[i]; {
		case c == '"':
			j, esc, ok := 0, false, true
			// Inlined scanStr for plain strings, eight bytes at a time.
			for p := i + 1; p+8 <= len(b); p += 8 {
				x := binary.LittleEndian.Uint64(b[p:])
				if m := special(x); m != 0 {
					// The flagged byte is read from x, not reloaded from b.
					if tz := bits.TrailingZeros64(m); byte(x>>(tz&^7)) == '"' {
						j = p + 1 + tz>>3
					}
					break
				}
			}
			if j == 0 {
				if j, esc, ok = scanStr(b, i); !ok {
					s.pos = j
					return false
				}
			}
			sp = span{i + 1, j - 1, kindString}
			if esc {
				sp.kind = kindEsc
			}
			i = j
		case c == '-' || isDigit(c):
			// Inlined scanNum for integers without sign or leading zero (ids,
			// epoch times): one SWAR digit run, no call.
			j := 0
			if c != '0' && c != '-' {
				if j = skipDigits(b, i+1); j >= len(b) || b[j] == '.' || b[j]|0x20 == 'e' {
					j = 0
				}
			}
			if j == 0 {
				if j, ok = scanNum(b, i); !ok {
					s.pos = j
					return false
				}
			}
			sp = span{i, j, kindNumber}
			i = j
		case c == 't' && i+4 <= len(b) && string(b[i:i+4]) == "true":
			sp, i = span{i, i + 4, kindTrue}, i+4
		case c == 'f' && i+5 <= len(b) && string(b[i:i+5]) == "false":
			sp, i = span{i, i + 5, kindFalse}, i+5
		default: // objects, arrays, null and errors
			s.pos = i
			var children *pathLevel
			if node != nil {
				children = node.children
			}
			if sp, ok = s.value(children, depth); !ok {
				return false
			}
			i = s.pos
		}
		if node != nil && node.field >= 0 {
			s.cap[node.field] = sp
		}
		if depth == 1 && s.rec != nil {
			s.rec.add(vs, i, sp.kind, node)
		}
		if i >= len(b) || (b[i] != ',' && b[i] != '}') {
			i = skipWS(b, i)
		}
		if i >= len(b) {
			s.pos = i
			return false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			s.pos = i + 1
			return true
		default:
			s.pos = i
			return false
		}
	}
}

func (s *scanner) array(depth int) bool {
	s.pos++ // '['
	s.ws()
	if s.pos < len(s.b) && s.b[s.pos] == ']' {
		s.pos++
		return true
	}
	for {
		if _, ok := s.value(nil, depth); !ok {
			return false
		}
		s.ws()
		if s.pos >= len(s.b) {
			return false
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return true
		default:
			return false
		}
	}
}

// unescape appends the decoded form of a JSON string body (without quotes)
// to dst. The body was validated by str.
func unescape(dst, body []byte) []byte {
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch body[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := rune(hexVal(body[i+1 : i+5]))
			i += 4
			if r >= 0xD800 && r < 0xDC00 && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
				lo := rune(hexVal(body[i+3 : i+7]))
				if lo >= 0xDC00 && lo < 0xE000 {
					r = (r-0xD800)<<10 | (lo - 0xDC00) + 0x10000
					i += 6
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				// A lone surrogate: keep its (invalid UTF-8) three bytes
				// rather than U+FFFD, so two different ones never read
				// as the same string (keys with it are rejected).
				dst = append(dst, 0xED, 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
				continue
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, body[i])
		}
	}
	return dst
}

func hexVal(h []byte) uint32 {
	var v uint32
	for _, c := range h {
		v <<= 4
		switch {
		case c >= '0' && c <= '9':
			v |= uint32(c - '0')
		case c >= 'a' && c <= 'f':
			v |= uint32(c-'a') + 10
		default:
			v |= uint32(c-'A') + 10
		}
	}
	return v
}
