package candle

import (
	"fmt"
	"strconv"
	"time"
)

// Unit is the unit of a Timeframe.
type Unit uint8

// Units, smallest first.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
)

var unitSuffix = map[Unit]string{Second: "s", Minute: "m", Hour: "h", Day: "d", Week: "w", Month: "M"}

const dayMillis = 86_400_000

// Timeframe is a window length: N seconds, minutes, hours or days aligned to
// the Unix epoch, or a calendar week (Monday 00:00) or month. Day, week and
// month boundaries fall on local midnight in Loc; seconds, minutes and hours
// ignore Loc. A zero Loc means UTC.
type Timeframe struct {
	N    int
	Unit Unit
	Loc  *time.Location
}

// ParseTimeframe parses "30s", "1m", "5m", "4h", "1d", "1w" or "1M". Weeks and
// months take N = 1 only. loc (nil = UTC) places day, week and month boundaries.
func ParseTimeframe(s string, loc *time.Location) (Timeframe, error) {
	if len(s) < 2 {
		return Timeframe{}, fmt.Errorf("timeframe %q: want a count and a unit, like 1m, 4h, 1d, 1w or 1M", s)
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 {
		return Timeframe{}, fmt.Errorf("timeframe %q: the count must be a positive whole number", s)
	}
	var u Unit
	for k, v := range unitSuffix {
		if v == s[len(s)-1:] {
			u = k
		}
	}
	if u == 0 {
		return Timeframe{}, fmt.Errorf("timeframe %q: unknown unit %q (use s, m, h, d, w or M)", s, s[len(s)-1:])
	}
	if (u == Week || u == Month) && n != 1 {
		return Timeframe{}, fmt.Errorf("timeframe %q: weeks and months take a count of 1 (1w, 1M)", s)
	}
	tf := Timeframe{N: n, Unit: u}
	if u >= Day && loc != nil && loc != time.UTC {
		tf.Loc = loc
	}
	return tf, nil
}

// String returns the short form, e.g. "5m" or "1M" (without the zone).
func (tf Timeframe) String() string { return strconv.Itoa(tf.N) + unitSuffix[tf.Unit] }

func (tf Timeframe) loc() *time.Location {
	if tf.Loc == nil {
		return time.UTC
	}
	return tf.Loc
}

// fixed reports whether windows are a constant length aligned to the epoch,
// and returns that length in milliseconds.
func (tf Timeframe) fixed() (int64, bool) {
	switch tf.Unit {
	case Second:
		return int64(tf.N) * 1000, true
	case Minute:
		return int64(tf.N) * 60_000, true
	case Hour:
		return int64(tf.N) * 3_600_000, true
	case Day:
		if tf.Loc == nil {
			return int64(tf.N) * dayMillis, true
		}
	}
	return 0, false
}

// Start returns the open time (Unix ms) of the window containing ms.
func (tf Timeframe) Start(ms int64) int64 {
	if size, ok := tf.fixed(); ok {
		return floorDiv(ms, size) * size
	}
	t := time.UnixMilli(ms).In(tf.loc())
	y, m, d := t.Date()
	switch tf.Unit {
	case Day:
		days := civilDays(y, m, d)
		days = floorDiv(days, int64(tf.N)) * int64(tf.N)
		y, m, d = civilDate(days)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		d -= back
	case Month:
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, tf.loc()).UnixMilli()
}

// End returns the close time (exclusive) of the window that opens at open.
func (tf Timeframe) End(open int64) int64 {
	if size, ok := tf.fixed(); ok {
		return open + size
	}
	t := time.UnixMilli(open).In(tf.loc())
	y, m, d := t.Date()
	switch tf.Unit {
	case Day:
		d += tf.N
	case Week:
		d += 7
	case Month:
		m++
	}
	return time.Date(y, m, d, 0, 0, 0, 0, tf.loc()).UnixMilli()
}

// Nests reports whether every window of sup is an exact union of windows of
// sub, so that sup can be rolled up from sub. It returns an error saying why not.
func Nests(sub, sup Timeframe) error {
	no := func(why string) error {
		return fmt.Errorf("%s%s cannot be built from %s%s: %s", sup, zoneSuffix(sup), sub, zoneSuffix(sub), why)
	}
	subSize, subFixed := sub.fixed()
	supSize, supFixed := sup.fixed()
	switch {
	case subFixed && supFixed:
		if supSize <= subSize || supSize%subSize != 0 {
			return no(fmt.Sprintf("%s is not a multiple of %s", sup, sub))
		}
		return nil
	case subFixed: // calendar sup: boundaries at local midnight in sup's zone
		if subSize > dayMillis || dayMillis%subSize != 0 {
			return no(fmt.Sprintf("%s windows do not divide a day", sub))
		}
		for _, off := range zoneOffsets(sup.loc()) {
			if (off*1000)%subSize != 0 {
				return no(fmt.Sprintf("in %s a day starts at %s UTC, which is not a %s boundary",
					sup.loc(), time.UnixMilli(-off*1000).UTC().Format("15:04"), sub))
			}
		}
		return nil
	case supFixed:
		return no(fmt.Sprintf("%s windows follow the calendar of %s, %s windows do not", sub, sub.loc(), sup))
	}
	if sub.loc().String() != sup.loc().String() {
		return no(fmt.Sprintf("their zones differ (%s vs %s)", sub.loc(), sup.loc()))
	}
	switch {
	case sub.Unit == Day && sup.Unit == Day:
		if sup.N <= sub.N || sup.N%sub.N != 0 {
			return no(fmt.Sprintf("%s is not a multiple of %s", sup, sub))
		}
		return nil
	case sub.Unit == Day && sub.N == 1 && (sup.Unit == Week || sup.Unit == Month):
		return nil
	case sub.Unit == Week && sup.Unit == Month:
		return no("months do not start on a Monday")
	}
	return no("the windows do not line up")
}

func zoneSuffix(tf Timeframe) string {
	if tf.Loc == nil || tf.Unit < Day {
		return ""
	}
	return " (" + tf.Loc.String() + ")"
}

// zoneOffsets returns the distinct UTC offsets (seconds) loc uses at local
// midnights from 1970 to 2100, sampled twice a month (DST changes included).
func zoneOffsets(loc *time.Location) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for y := 1970; y <= 2100; y++ {
		for m := time.January; m <= time.December; m++ {
			for _, d := range []int{1, 16} {
				_, off := time.Date(y, m, d, 0, 0, 0, 0, loc).Zone()
				if !seen[int64(off)] {
					seen[int64(off)] = true
					out = append(out, int64(off))
				}
			}
		}
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// civilDays returns days since 1970-01-01 for a proleptic Gregorian date.
func civilDays(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

func civilDate(days int64) (int, time.Month, int) {
	return time.Unix(days*86400, 0).UTC().Date()
}
