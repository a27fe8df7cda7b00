package wire

import (
	"encoding/binary"
	"math"

	"github.com/nakcast/nakcast/digest"
)

// Data sizes.
const (
	// DataOverhead is the number of bytes before the first message of a 1.0
	// DATA datagram (common header and fixed part), trailer not included.
	DataOverhead = HeaderLen + DataFixed
	// MsgOverhead is the per-message cost in a bundle: its uint16 length.
	MsgOverhead = 2
	// MaxMessageLen is the largest message a bundle can carry; larger ones
	// are fragmented.
	MaxMessageLen = math.MaxUint16
)

// MaxBundleMessages returns how many messages of msgSize bytes fit in one
// DATA datagram of datagram bytes (subtract TrailerLen first when
// authenticating), or 0 if not even one does.
func MaxBundleMessages(datagram, msgSize int) int {
	if msgSize < 0 || msgSize > MaxMessageLen || datagram < DataOverhead {
		return 0
	}
	return (datagram - DataOverhead) / (MsgOverhead + msgSize)
}

// MaxBundledMessageLen returns the largest message that travels unfragmented
// in a DATA datagram of datagram bytes (trailer subtracted as above), or -1
// if none does.
func MaxBundledMessageLen(datagram int) int {
	return min(MaxMessageLen, datagram-DataOverhead-MsgOverhead)
}

// Data is a decoded DATA datagram: Count messages with seqnos First ..
// First+Count-1 sent by Origin. Origin is the header's Sender except when a
// peer repairs the data of a sender that has left the view. The messages are
// read in place with Messages. FlagRepair in the header marks a
// retransmission.
type Data struct {
	Origin digest.Member
	First  uint64
	Count  int
	msgs   []byte
}

// Last returns the seqno of the last message, First+Count-1.
func (d *Data) Last() uint64 { return d.First + uint64(d.Count) - 1 }

// Messages returns an iterator over the messages, in seqno order.
func (d *Data) Messages() MsgIter { return MsgIter{b: d.msgs, seq: d.First - 1} }

// AppendMessages appends the Count payloads to dst (slices of the datagram,
// no copies) and returns it; with cap(dst) large enough it does not allocate.
func (d *Data) AppendMessages(dst [][]byte) [][]byte {
	return appendPayloads(dst, d.Messages())
}

func appendPayloads(dst [][]byte, it MsgIter) [][]byte {
	for p, ok := it.Next(); ok; p, ok = it.Next() {
		dst = append(dst, p)
	}
	return dst
}

// MsgIter reads the messages of a Data in place. The zero value is empty.
type MsgIter struct {
	b   []byte
	seq uint64
}

// Next returns the next message's payload, a slice of the datagram capped at
// its length (appending to it cannot overwrite the next message), or ok
// false after the last one.
func (it *MsgIter) Next() (payload []byte, ok bool) {
	if len(it.b) < MsgOverhead {
		return nil, false
	}
	end := MsgOverhead + int(binary.LittleEndian.Uint16(it.b))
	if end > len(it.b) {
		it.b = nil
		return nil, false
	}
	payload = it.b[MsgOverhead:end:end]
	it.b = it.b[end:]
	it.seq++
	return payload, true
}

// Seq returns the seqno of the message last returned by Next.
func (it *MsgIter) Seq() uint64 { return it.seq }

// DecodeData decodes the body of a DATA datagram (h and body as returned by
// DecodeHeader). It walks every message length: the count must be at least 1
// and the messages must end exactly at the end of the body (ErrTruncated if a
// length runs past it or messages are missing, ErrMalformed if bytes are
// left over). First must be at least 1, the run must not overflow, Origin must
// not be zero. It does not allocate.
func DecodeData(h Header, body []byte) (Data, error) {
	d, _, err := decodeData(h, body, nil, false)
	return d, err
}

// DecodeDataOffsets is DecodeData that also records where the messages
// lie, so that a receiver walks their lengths once instead of twice (the
// walk is a chain of dependent loads, about 2 ns a message): it appends to
// offs[:0] the offset in body of each message (its length prefix), then
// len(body), and returns it (Count+1 entries). Message i's payload is
// body[offs[i]+MsgOverhead : offs[i+1]]. It allocates only when offs is
// too short. On error offs holds no meaningful offsets.
func DecodeDataOffsets(h Header, body []byte, offs []uint32) (Data, []uint32, error) {
	return decodeData(h, body, offs[:0], true)
}

func decodeData(h Header, body []byte, offs []uint32, record bool) (Data, []uint32, error) {
	dh, err := DecodeDataHead(h, body)
	if err != nil {
		return Data{}, offs, err
	}
	at := dh.start
	for range dh.Count {
		if record {
			offs = append(offs, uint32(at))
		}
		_, _, next, ok := NextMsg(body, at)
		if !ok {
			return Data{}, offs, ErrTruncated
		}
		at = next
	}
	if at != len(body) {
		return Data{}, offs, ErrMalformed
	}
	if record {
		offs = append(offs, uint32(at))
	}
	return Data{Origin: dh.Origin, First: dh.First, Count: dh.Count, msgs: body[dh.start:]}, offs, nil
}

// DataHead is a DATA datagram whose fixed part is checked and whose
// messages are not yet: a receiver walks them with NextMsg from Start,
// checking and storing each in one pass, and accepts the datagram only if
// the walk ends at the end of Body. Count steps of NextMsg that all
// succeed and end there accept exactly what DecodeData accepts, with the
// same Origin, First and Count; any failure is a datagram DecodeData
// rejects (decode it to learn which error).
type DataHead struct {
	Origin digest.Member
	First  uint64
	Count  int
	body   []byte
	start  int // where the first message's length prefix lies in body
}

// DecodeDataHead decodes and checks the fixed part of a DATA datagram's
// body (h and body as returned by DecodeHeader), not its messages. Its
// errors are DecodeData's for the fixed part.
func DecodeDataHead(h Header, body []byte) (DataHead, error) {
	fix, rest, err := split(h, body, TypeData, DataFixed)
	if err != nil {
		return DataHead{}, err
	}
	first := binary.LittleEndian.Uint64(fix)
	origin := getMember(fix[8:])
	count := binary.LittleEndian.Uint32(fix[20:])
	if first == 0 || count == 0 || origin.IsZero() || first-1 > math.MaxUint64-uint64(count) {
		return DataHead{}, ErrMalformed
	}
	if uint64(count) > uint64(len(rest)/MsgOverhead) {
		return DataHead{}, ErrTruncated
	}
	return DataHead{Origin: origin, First: first, Count: int(count), body: body, start: len(body) - len(rest)}, nil
}

// Body returns the datagram's body, in which NextMsg walks.
func (d *DataHead) Body() []byte { return d.body }

// Start returns where the first message lies in Body.
func (d *DataHead) Start() int { return d.start }

// NextMsg reads the message at at in a DATA body (Start, then each step's
// next): where its payload starts, its length and where the next message
// lies. ok is false if its length prefix or its payload runs past body.
// A loop of NextMsg keeps its position in registers, where a cursor
// struct would live in memory.
func NextMsg(body []byte, at int) (off, n, next int, ok bool) {
	if at < 0 || len(body)-at < MsgOverhead {
		return 0, 0, 0, false
	}
	n = MsgLen(body, at)
	next = at + MsgOverhead + n
	if next > len(body) {
		return 0, 0, 0, false
	}
	return at + MsgOverhead, n, next, true
}

// MsgLen is the length prefix of the message at at in a DATA body: the
// payload follows it, MsgOverhead bytes on. The caller checks that the
// prefix lies in body (at+MsgOverhead <= len(body)) and that the payload
// does, as NextMsg does; a hot loop that keeps its position in registers
// reads prefixes with it instead of taking NextMsg's four results.
func MsgLen(body []byte, at int) int { return int(binary.LittleEndian.Uint16(body[at:])) }

// DataWriter builds a DATA datagram in a caller's buffer: Reset, then Append
// or Claim messages until one does not fit, then Finish. The zero value
// accepts nothing until Reset. A DataWriter does not allocate.
type DataWriter struct {
	buf      []byte
	h        Header
	off      int    // end of the last message
	limit    int    // where messages must end: len(buf) minus the trailer
	count    int    // messages so far
	maxCount uint64 // the run must not pass math.MaxUint64 nor the uint32 count
}

// Reset starts a bundle in buf (its length, not its capacity, is the
// datagram limit) with header h (Type and Len are set by the writer),
// messages from origin starting at seqno first. It fails with ErrMalformed
// for a zero origin, first 0 or a header the decoder would reject, and with
// ErrShortBuffer if buf cannot hold the header, one empty message and the
// trailer; the writer then accepts nothing.
func (w *DataWriter) Reset(buf []byte, h Header, origin digest.Member, first uint64) error {
	*w = DataWriter{}
	if err := checkHeader(h); err != nil {
		return err
	}
	if origin.IsZero() || first == 0 {
		return ErrMalformed
	}
	limit := len(buf) - trailerLen(h)
	if limit < DataOverhead+MsgOverhead {
		return ErrShortBuffer
	}
	h.Type, h.Len = TypeData, DataOverhead
	putHeader(buf, h)
	b := buf[HeaderLen:DataOverhead]
	binary.LittleEndian.PutUint64(b, first)
	putMember(b[8:], origin)
	binary.LittleEndian.PutUint32(b[20:], 0)
	*w = DataWriter{
		buf: buf, h: h, off: DataOverhead, limit: limit,
		maxCount: min(math.MaxUint32, math.MaxUint64-first+1),
	}
	return nil
}

// Append adds a copy of payload as the next message. It returns false, and
// changes nothing, if the message does not fit in the buffer, is longer than
// MaxMessageLen, or the run is full.
func (w *DataWriter) Append(payload []byte) bool {
	p := w.Claim(len(payload))
	if p == nil {
		return false
	}
	copy(p, payload)
	return true
}

// Claim adds a message of n bytes and returns the slice where the caller
// writes it in place (zero copy), capped at n. It returns nil, and changes
// nothing, when Append would return false.
func (w *DataWriter) Claim(n int) []byte {
	if n < 0 || n > MaxMessageLen || uint64(w.count) >= w.maxCount || w.limit-w.off < MsgOverhead+n {
		return nil
	}
	binary.LittleEndian.PutUint16(w.buf[w.off:], uint16(n))
	start := w.off + MsgOverhead
	w.off = start + n
	w.count++
	return w.buf[start:w.off:w.off]
}

// AppendRun appends copies of the longest prefix of pls that fits: at
// most maxCount messages, each at most maxLen (and MaxMessageLen) bytes
// long, as many as the buffer holds. It writes where each payload begins
// in the buffer into offs (offs[i] for pls[i]) and returns how many it
// took, at most len(offs). It is Append in a loop that keeps the writer's
// state in registers: a bundler's per-message path.
func (w *DataWriter) AppendRun(pls [][]byte, maxCount, maxLen int, offs []uint32) int {
	if w.buf == nil || maxCount <= 0 {
		return 0
	}
	maxLen = min(maxLen, MaxMessageLen)
	n := min(len(pls), len(offs), maxCount)
	if room := w.maxCount - uint64(w.count); uint64(n) > room {
		n = int(room)
	}
	buf, off := w.buf[:w.limit], w.off
	pls, offs = pls[:n], offs[:n]
	k := 0
	for ; k < len(pls); k++ {
		pl := pls[k]
		start := off + MsgOverhead
		end := start + len(pl)
		if len(pl) > maxLen || end > len(buf) {
			break
		}
		b := buf[off:end]
		binary.LittleEndian.PutUint16(b, uint16(len(pl)))
		copy(b[MsgOverhead:], pl)
		offs[k] = uint32(start)
		off = end
	}
	w.off, w.count = off, w.count+k
	return k
}

// Grow moves the bundle into buf, which must be at least as long as the
// current buffer: the bytes written so far are copied and the limit
// becomes buf's length (less the trailer). Slices returned by Claim keep
// pointing into the old buffer; their offsets are the same in buf. It
// fails with ErrShortBuffer, changing nothing, if buf is shorter.
func (w *DataWriter) Grow(buf []byte) error {
	if len(buf) < len(w.buf) {
		return ErrShortBuffer
	}
	copy(buf, w.buf[:w.off])
	w.buf, w.limit = buf, len(buf)-trailerLen(w.h)
	return nil
}

// Adopt takes count messages that the caller wrote in place after the
// fixed part, in the wire's per-message layout (a little-endian uint16
// length, then the payload), ending at byte end of the buffer given to
// Reset: the log-buffer publication's producers write a datagram's
// messages before its header exists. It walks the length prefixes once,
// putting each payload (a slice of the buffer) into ps when ps is not nil
// (it must hold count), and fails with ErrMalformed, changing nothing but
// ps, if they do not end at end, if the messages do not fit before the
// trailer, if ps is too short or if messages were added already.
func (w *DataWriter) Adopt(count, end int, ps [][]byte) error {
	if !w.adoptable(count, end) || (ps != nil && len(ps) < count) {
		return ErrMalformed
	}
	off := w.off
	for i := range count {
		if end-off < MsgOverhead {
			return ErrMalformed
		}
		start := off + MsgOverhead
		off = start + int(binary.LittleEndian.Uint16(w.buf[off:]))
		if ps != nil && off <= end {
			ps[i] = w.buf[start:off:off]
		}
	}
	if off != end {
		return ErrMalformed
	}
	w.off, w.count = end, count
	return nil
}

// adoptable reports whether count messages ending at end could be
// adopted: nothing added yet, a count the run allows, and an end before
// the trailer.
func (w *DataWriter) adoptable(count, end int) bool {
	return w.buf != nil && w.count == 0 && count >= 1 && uint64(count) <= w.maxCount && end <= w.limit
}

// AdoptWalked is Adopt for a caller that checked the layout itself in its
// own walk over the length prefixes (NextMsg from DataOverhead: count
// messages ending exactly at end), storing what it needs of each message
// as it went. It fails with ErrMalformed, changing nothing, where Adopt
// would fail before its walk; call it before that walk, so that the walk
// is the only check left.
func (w *DataWriter) AdoptWalked(count, end int) error {
	if !w.adoptable(count, end) {
		return ErrMalformed
	}
	w.off, w.count = end, count
	return nil
}

// AppendPayloads appends the payloads of the messages added or adopted
// since Reset (slices of the buffer, no copies) to dst and returns it; with
// cap(dst) large enough it does not allocate.
func (w *DataWriter) AppendPayloads(dst [][]byte) [][]byte {
	if w.buf == nil {
		return dst
	}
	return appendPayloads(dst, MsgIter{b: w.buf[DataOverhead:w.off]})
}

// Count returns the number of messages added since Reset.
func (w *DataWriter) Count() int { return w.count }

// Next returns the seqno the next message would get.
func (w *DataWriter) Next() uint64 {
	if w.buf == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(w.buf[HeaderLen:]) + uint64(w.count)
}

// Len returns the length the datagram would have if finished now, trailer
// included.
func (w *DataWriter) Len() int {
	if w.buf == nil {
		return 0
	}
	return w.off + trailerLen(w.h)
}

// Remaining returns the largest message Append would accept now, or -1 if
// none (not even an empty one).
func (w *DataWriter) Remaining() int {
	if w.buf == nil || uint64(w.count) >= w.maxCount {
		return -1
	}
	return min(MaxMessageLen, w.limit-w.off-MsgOverhead)
}

// Finish writes the count and the zeroed trailer (FlagAuth) and returns the
// datagram, a prefix of the buffer given to Reset. It returns nil if no
// message was added (an empty DATA is malformed). Messages may still be
// added after Finish; call it again to get the longer datagram.
func (w *DataWriter) Finish() []byte {
	if w.count == 0 {
		return nil
	}
	binary.LittleEndian.PutUint32(w.buf[HeaderLen+20:], uint32(w.count))
	return finish(w.buf, w.h, w.off)
}
