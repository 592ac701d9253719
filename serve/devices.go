package serve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kandle/kandle/candle"
)

// Devices is the store of a device fleet: the readings a source's DynamoDB
// sink writes and the silence events of a silence processor's sinks. Each
// paged read takes the page token the previous page returned ("" for the
// first) and returns the next one ("" at the end).
type Devices interface {
	// LatestReading is the newest reading of device (strongly consistent).
	LatestReading(ctx context.Context, device string) (candle.Trade, bool, error)
	// Readings are device's readings with ts in [from, to), oldest first.
	Readings(ctx context.Context, device string, from, to int64, limit int, page string) ([]candle.Trade, string, error)
	// ByStatus are the devices whose current silence level is level, one
	// JSON object each (eventually consistent: an index).
	ByStatus(ctx context.Context, level string, limit int, page string) ([]json.RawMessage, string, error)
	// Silences are device's silence events, one JSON object each.
	Silences(ctx context.Context, device string, limit int, page string) ([]json.RawMessage, string, error)
}

var (
	// ErrBadPage is what a Devices read returns (wrapped) for a page token
	// it did not hand out.
	ErrBadPage = errors.New("bad page token")
	// ErrNotConfigured is what a Devices read returns (wrapped, with the
	// setting to make) when no store answers that read.
	ErrNotConfigured = errors.New("not configured")
)

// maxDeviceID is the longest device id the API accepts, in bytes.
const maxDeviceID = 256

// deviceID reads and checks the {id} of a device path.
func deviceID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	switch {
	case id == "":
		return "", bad("device id: empty; use GET /v1/devices/{id}/latest with the id the readings carry")
	case len(id) > maxDeviceID:
		return "", bad("device id: %d bytes; ids are at most %d bytes", len(id), maxDeviceID)
	case !utf8.ValidString(id):
		return "", bad("device id: not UTF-8; send the id as the readings carry it, percent-encoded in the path")
	case strings.ContainsFunc(id, unicode.IsControl):
		return "", bad("device id: %q holds control characters; send the id as the readings carry it", id)
	}
	return id, nil
}

// devicePage is the position of a device API page: the request it pages
// and the store's token.
type devicePage struct {
	Read   string `json:"k"` // readings, silences or status
	Device string `json:"d,omitempty"`
	Status string `json:"s,omitempty"`
	From   int64  `json:"f,omitempty"`
	To     int64  `json:"t,omitempty"`
	Token  string `json:"p"`
}

func (c devicePage) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// devicePageOf decodes the cursor parameter; it must page the same device
// or status as the request.
func devicePageOf(v string, want devicePage) (devicePage, error) {
	var c devicePage
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(b, &c) != nil || c.Token == "" || c.Read != want.Read || c.Device != want.Device || c.Status != want.Status {
		return devicePage{}, bad("cursor: not a cursor this API returned for this request; start again without it")
	}
	return c, nil
}

// deviceErr maps the store's errors the client can act on.
func deviceErr(err error) error {
	switch {
	case errors.Is(err, ErrBadPage):
		return bad("cursor: not a cursor this API returned for this request; start again without it")
	case errors.Is(err, ErrNotConfigured):
		return notFound("%s", strings.TrimSuffix(err.Error(), ": "+ErrNotConfigured.Error()))
	}
	return err
}

// pageRequest reads the store, limit and cursor of a paged device request:
// pg is first (the first page) or the position the cursor holds.
func (s *Server) pageRequest(r *http.Request, first devicePage) (d Devices, limit int, pg devicePage, err error) {
	if d, err = s.devices(); err != nil {
		return nil, 0, first, err
	}
	p := r.URL.Query()
	if limit, err = s.limit("limit", p.Get("limit")); err != nil {
		return nil, 0, first, err
	}
	if c := p.Get("cursor"); c != "" {
		pg, err = devicePageOf(c, first)
		return d, limit, pg, err
	}
	return d, limit, first, nil
}

func (s *Server) devices() (Devices, error) {
	if s.o.Devices == nil {
		return nil, notFound("the device API is not configured: name the device stores in serve.devices of the topology")
	}
	return s.o.Devices, nil
}

// appendReading writes a reading as {"device", "ts", "time", "value", "qty"[, "id"]}.
func appendReading(b []byte, device string, tr *candle.Trade) []byte {
	b = append(b, `{"device":`...)
	b = strconv.AppendQuote(b, device)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, tr.TS, 10)
	b = append(b, `,"time":"`...)
	b = time.UnixMilli(tr.TS).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, `","value":"`...)
	b = tr.Price.Append(b)
	b = append(b, `","qty":"`...)
	b = tr.Qty.Append(b)
	b = append(b, '"')
	if tr.ID != "" {
		b = append(b, `,"id":`...)
		b = strconv.AppendQuote(b, tr.ID)
	}
	return append(b, '}')
}

// handleDeviceLatest is GET /v1/devices/{id}/latest.
func (s *Server) handleDeviceLatest(w http.ResponseWriter, r *http.Request) error {
	d, err := s.devices()
	if err != nil {
		return err
	}
	id, err := deviceID(r)
	if err != nil {
		return err
	}
	tr, ok, err := d.LatestReading(r.Context(), id)
	if err != nil {
		return deviceErr(err)
	}
	if !ok {
		return notFound("device %q has no reading (GET /v1/devices?status=... lists devices by silence level)", id)
	}
	return writeJSON(w, append(appendReading(nil, id, &tr), '\n'))
}

// handleDeviceReadings is GET /v1/devices/{id}/readings?start=&end=&limit=&cursor=.
func (s *Server) handleDeviceReadings(w http.ResponseWriter, r *http.Request) error {
	id, err := deviceID(r)
	if err != nil {
		return err
	}
	d, limit, pg, err := s.pageRequest(r, devicePage{Read: "readings", Device: id, To: maxTime + 1})
	if err != nil {
		return err
	}
	if pg.Token == "" {
		p := r.URL.Query()
		if v := p.Get("start"); v != "" {
			if pg.From, err = parseTime("start", v); err != nil {
				return err
			}
		}
		if v := p.Get("end"); v != "" {
			if pg.To, err = parseTime("end", v); err != nil {
				return err
			}
		}
		if pg.To <= pg.From {
			return bad("the range is empty or reversed: end (%d) must be after start (%d)", pg.To, pg.From)
		}
	}
	trs, next, err := d.Readings(r.Context(), id, pg.From, pg.To, limit, pg.Token)
	if err != nil {
		return deviceErr(err)
	}
	if len(trs) == 0 && pg.Token == "" {
		// Nothing in the range: say so for a device that never reported.
		if _, ok, err := d.LatestReading(r.Context(), id); err != nil {
			return deviceErr(err)
		} else if !ok {
			return notFound("device %q has no reading (GET /v1/devices?status=... lists devices by silence level)", id)
		}
	}
	b := append(make([]byte, 0, 64+len(trs)*100), `{"device":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"readings":[`...)
	for i := range trs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendReading(b, id, &trs[i])
	}
	b = append(b, ']')
	b = appendNext(b, pg, next)
	return writeJSON(w, append(b, "}\n"...))
}

// appendNext writes the next_cursor field when the store has another page.
func appendNext(b []byte, pg devicePage, next string) []byte {
	if next == "" {
		return b
	}
	pg.Token = next
	b = append(b, `,"next_cursor":"`...)
	b = append(b, pg.encode()...)
	return append(b, '"')
}

// handleDevicesByStatus is GET /v1/devices?status=LEVEL&limit=&cursor=.
func (s *Server) handleDevicesByStatus(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.devices(); err != nil {
		return err
	}
	level := r.URL.Query().Get("status")
	if !slices.Contains(s.o.DeviceLevels, level) {
		if level == "" {
			return bad("status: required, one of %s", strings.Join(s.o.DeviceLevels, ", "))
		}
		return bad("status: %q is not a silence level; use one of %s", level, strings.Join(s.o.DeviceLevels, ", "))
	}
	d, limit, pg, err := s.pageRequest(r, devicePage{Read: "status", Status: level})
	if err != nil {
		return err
	}
	items, next, err := d.ByStatus(r.Context(), level, limit, pg.Token)
	if err != nil {
		return deviceErr(err)
	}
	b := append(make([]byte, 0, 64+len(items)*160), `{"status":`...)
	b = strconv.AppendQuote(b, level)
	b = appendItems(b, "devices", items)
	b = appendNext(b, pg, next)
	return writeJSON(w, append(b, "}\n"...))
}

func appendItems(b []byte, name string, items []json.RawMessage) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

// handleDeviceSilences is GET /v1/devices/{id}/silences?limit=&cursor=.
func (s *Server) handleDeviceSilences(w http.ResponseWriter, r *http.Request) error {
	id, err := deviceID(r)
	if err != nil {
		return err
	}
	d, limit, pg, err := s.pageRequest(r, devicePage{Read: "silences", Device: id})
	if err != nil {
		return err
	}
	items, next, err := d.Silences(r.Context(), id, limit, pg.Token)
	if err != nil {
		return deviceErr(err)
	}
	if len(items) == 0 && pg.Token == "" {
		// No silence yet is an answer for a known device only.
		if _, ok, err := d.LatestReading(r.Context(), id); err != nil && !errors.Is(err, ErrNotConfigured) {
			return deviceErr(err)
		} else if err == nil && !ok {
			return notFound("device %q has no reading and no silence event", id)
		}
	}
	b := append(make([]byte, 0, 64+len(items)*160), `{"device":`...)
	b = strconv.AppendQuote(b, id)
	b = appendItems(b, "events", items)
	b = appendNext(b, pg, next)
	return writeJSON(w, append(b, "}\n"...))
}
