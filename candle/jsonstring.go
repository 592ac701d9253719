package candle

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string that any strict parser reads
// back: quotes, backslashes and control characters are escaped as JSON
// requires (\" \\ \n \r \t \u00XX), and so are U+2028/U+2029 (for
// JavaScript readers). Bytes that are not valid UTF-8 are written as
// \u00XX of the byte value, never as U+FFFD, so two different invalid
// inputs stay two different strings and no two symbols merge. Valid
// strings without those characters are copied as they are.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// KeyProblem says why kb cannot be a key (symbol or device id), or "" when
// it can. Keys name DynamoDB items, Parquet paths, Valkey keys and JSON
// strings, so they must be printable UTF-8: invalid UTF-8 (which readers
// replace, merging two keys), control characters and U+FFFD (the mark of
// such a replacement upstream) are rejected rather than rewritten.
func KeyProblem(kb []byte) string {
	for i := 0; i < len(kb); {
		c := kb[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Sprintf("has the control character %#02x at byte %d", c, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(kb[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("is not valid UTF-8 at byte %d", i)
		case r == utf8.RuneError:
			return fmt.Sprintf("has U+FFFD (a replaced invalid character) at byte %d", i)
		case unicode.IsControl(r):
			return fmt.Sprintf("has the control character %U at byte %d", r, i)
		}
		i += size
	}
	return ""
}
