package processors

import "unicode/utf8"

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
	first [256]bool
}

type pathNode struct {
	name     string
	field    int        // index into the capture array, -1 for an inner node
	children *pathLevel // nil for a leaf
}

// index fills the first-byte tables of l and its descendants.
func (l *pathLevel) index() {
	for i := range l.nodes {
		l.first[l.nodes[i].name[0]] = true
		if c := l.nodes[i].children; c != nil {
			c.index()
		}
	}
}

type scanner struct {
	b   []byte
	pos int
	cap *[numFields]span
}

func (s *scanner) ws() {
	b, i := s.b, s.pos
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.pos = i
}

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
	b, i := s.b, s.pos+1 // locals: the hot loop stays in registers
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.pos = i
			return false, false
		}
		switch c := b[i]; {
		case c == '"':
			s.pos = i + 1
			return esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return false, false
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return false, false
					}
				}
				i += 6
			default:
				s.pos = i
				return false, false
			}
		default: // a control character
			s.pos = i
			return false, false
		}
	}
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

func (s *scanner) digits() bool {
	b, i := s.b, s.pos
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	n := i - s.pos
	s.pos = i
	return n > 0
}

// number scans -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (s *scanner) number() bool {
	if s.b[s.pos] == '-' {
		s.pos++
	}
	if s.pos >= len(s.b) {
		return false
	}
	if s.b[s.pos] == '0' {
		s.pos++
	} else if !s.digits() {
		return false
	}
	if s.pos < len(s.b) && s.b[s.pos] == '.' {
		s.pos++
		if !s.digits() {
			return false
		}
	}
	if s.pos < len(s.b) && (s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.b) && (s.b[s.pos] == '+' || s.b[s.pos] == '-') {
			s.pos++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

func (s *scanner) object(lvl *pathLevel, depth int) bool {
	s.pos++ // '{'
	s.ws()
	if s.pos < len(s.b) && s.b[s.pos] == '}' {
		s.pos++
		return true
	}
	for {
		s.ws()
		if s.pos >= len(s.b) || s.b[s.pos] != '"' {
			return false
		}
		nameStart := s.pos + 1
		esc, ok := s.str()
		if !ok {
			return false
		}
		name := s.b[nameStart : s.pos-1]
		s.ws()
		if s.pos >= len(s.b) || s.b[s.pos] != ':' {
			return false
		}
		s.pos++
		var node *pathNode
		if lvl != nil && !esc && len(name) > 0 && lvl.first[name[0]] {
			for i := range lvl.nodes {
				if n := lvl.nodes[i].name; len(n) == len(name) && n[0] == name[0] && n == string(name) {
					node = &lvl.nodes[i]
					break
				}
			}
		}
		var sp span
		if node != nil {
			sp, ok = s.value(node.children, depth)
			if ok && node.field >= 0 {
				s.cap[node.field] = sp
			}
		} else {
			sp, ok = s.value(nil, depth)
		}
		if !ok {
			return false
		}
		s.ws()
		if s.pos >= len(s.b) {
			return false
		}
		switch s.b[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
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
