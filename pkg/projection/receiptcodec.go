package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A receipt part on disk is binary, not JSON: the history writes one per
// command and per command's events, and the on-disk store rewrites each
// several times as it compacts, so its size is what the store's
// compactions cost (docs/decisions.md, "Receipt parts in binary"). Its
// key holds the tenant and correlation id; the value holds, in order:
//
//	version      1 byte, receiptCodec
//	type         string
//	commandId    string
//	source       string
//	time         string
//	commandSeq   uvarint
//	status       1 byte: statusCodes' index
//	rejection    1 byte 0 (none) or 1, then code and message strings
//	events       uvarint count, then each sequence as a uvarint delta
//	             from the one before (they are ascending)
//	updatedAt    1 byte 0 (zero time) or 1, then varint Unix nanoseconds
//
// where a string is a uvarint length and its bytes.
const receiptCodec = 1

// statusCodes are the statuses a part's status byte names, by index.
var statusCodes = [...]string{StatusAccepted, StatusProcessed, StatusRejected}

// AppendReceiptPart appends r's encoding as a receipt part on disk to b,
// all but its tenant and correlation id (the key's).
func AppendReceiptPart(b []byte, r *Receipt) []byte {
	b = append(b, receiptCodec)
	for _, s := range [...]string{r.Type, r.CommandID, r.Source, r.Time} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, r.CommandSeq)
	status := byte(0)
	for i, s := range statusCodes {
		if s == r.Status {
			status = byte(i)
		}
	}
	b = append(b, status)
	if r.Rejection == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendString(b, r.Rejection.Code)
		b = appendString(b, r.Rejection.Message)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Events)))
	prev := uint64(0)
	for _, seq := range r.Events {
		b = binary.AppendUvarint(b, seq-prev)
		prev = seq
	}
	if r.UpdatedAt.IsZero() {
		return append(b, 0)
	}
	return binary.AppendVarint(append(b, 1), r.UpdatedAt.UnixNano())
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// errReceiptCodec says a receipt part on disk is not one AppendReceiptPart
// wrote.
var errReceiptCodec = errors.New("not a receipt part")

// ReadReceiptPart decodes a part AppendReceiptPart wrote into r, whose
// tenant and correlation id the caller sets from the key. A value cut short, of
// another version, or with bytes past its end is errReceiptCodec.
func ReadReceiptPart(raw []byte, r *Receipt) error {
	d := partDecoder{raw: raw}
	if v := d.byte(); v != receiptCodec {
		return fmt.Errorf("%w: version %d", errReceiptCodec, v)
	}
	r.Type, r.CommandID, r.Source, r.Time = d.string(), d.string(), d.string(), d.string()
	r.CommandSeq = d.uvarint()
	if s := int(d.byte()); s < len(statusCodes) {
		r.Status = statusCodes[s]
	} else {
		d.bad = true
	}
	switch d.byte() {
	case 0:
		r.Rejection = nil
	case 1:
		r.Rejection = &Rejection{Code: d.string(), Message: d.string()}
	default:
		d.bad = true
	}
	n := d.uvarint()
	if n > uint64(len(d.raw)) { // each sequence takes a byte at least
		d.bad = true
		n = 0
	}
	r.Events = nil
	if n > 0 {
		r.Events = make([]uint64, n)
	}
	prev := uint64(0)
	for i := range r.Events {
		prev += d.uvarint()
		r.Events[i] = prev
	}
	switch d.byte() {
	case 0:
		r.UpdatedAt = time.Time{}
	case 1:
		r.UpdatedAt = time.Unix(0, d.varint()).UTC()
	default:
		d.bad = true
	}
	if d.bad || len(d.raw) != 0 {
		return errReceiptCodec
	}
	return nil
}

// partDecoder reads a receipt part; a read past its end sets bad and
// reads zero.
type partDecoder struct {
	raw []byte
	bad bool
}

func (d *partDecoder) byte() byte {
	if len(d.raw) == 0 {
		d.bad = true
		return 0xff
	}
	c := d.raw[0]
	d.raw = d.raw[1:]
	return c
}

func (d *partDecoder) uvarint() uint64 { return readVarint(d, binary.Uvarint) }

func (d *partDecoder) varint() int64 { return readVarint(d, binary.Varint) }

// readVarint reads one number with read (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](d *partDecoder, read func([]byte) (T, int)) T {
	v, n := read(d.raw)
	if n <= 0 {
		d.bad, d.raw = true, nil
		return 0
	}
	d.raw = d.raw[n:]
	return v
}

func (d *partDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.raw)) {
		d.bad, d.raw = true, nil
		return ""
	}
	s := string(d.raw[:n])
	d.raw = d.raw[n:]
	return s
}
