package ring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Records is a single-producer, single-consumer ring of variable-length
// byte records (Aeron's OneToOneRingBuffer): the engine's delivery ring,
// from the agent that delivers to the application goroutine that polls.
//
// The producer reserves a record with Claim, writes it in place, and makes
// every record claimed so far visible with one Publish. The consumer reads
// records in order with Next, each valid until Release, which frees the
// space of every record read so far. A record never wraps: when it does not
// fit before the end of the buffer, the rest of the buffer is skipped (a
// padding record), so a record is one contiguous slice. Neither side
// blocks or allocates; a full ring refuses a Claim.
//
// Claim and Publish belong to one producer goroutine at a time, Next and
// Release to one consumer goroutine at a time; Len is an atomic snapshot
// safe from anywhere.
type Records struct {
	buf  []byte
	mask uint64

	_ [cacheLine]byte
	// tail is the end of the published records (the producer's release
	// store).
	tail atomic.Uint64
	// ptail is the end of the records claimed (producer only), xhead the
	// producer's copy of head, read again only when it shows too little
	// room.
	ptail uint64
	xhead uint64
	_     [cacheLine]byte
	// head is the end of the released records (the consumer's release
	// store).
	head atomic.Uint64
	// chead is the end of the records read (consumer only), xtail the
	// consumer's copy of tail.
	chead uint64
	xtail uint64
	_     [cacheLine]byte
}

// recordHeader is the bytes before each record: its length (uint32) and
// flags (uint32: recordPad for padding).
const recordHeader = 8

// recordPad flags a padding record: the rest of the buffer is skipped.
const recordPad = 1

// minRecordsCapacity is the smallest buffer NewRecords accepts.
const minRecordsCapacity = 64

// NewRecords returns an empty ring of capacity bytes, a power of two of at
// least 64.
func NewRecords(capacity int) (*Records, error) {
	if err := checkCapacity(capacity); err != nil || capacity < minRecordsCapacity {
		return nil, fmt.Errorf("new records: capacity %d: want a power of two >= %d: %w", capacity, minRecordsCapacity, ErrCapacity)
	}
	return &Records{buf: make([]byte, capacity), mask: uint64(capacity) - 1}, nil
}

// Capacity returns the buffer's size in bytes.
func (r *Records) Capacity() int { return len(r.buf) }

// MaxRecord returns the largest record Claim accepts: half the buffer less
// a header, so that a record fits whatever padding it needs.
func (r *Records) MaxRecord() int { return len(r.buf)/2 - recordHeader }

// align8 rounds n up to a multiple of 8.
func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// Claim reserves the next record of n bytes and returns it to be written.
// It fails (ok false) when the free space is too small or n is above
// MaxRecord. The record becomes visible to the consumer at the next
// Publish. Producer side.
func (r *Records) Claim(n int) (rec []byte, ok bool) {
	if n < 0 || n > r.MaxRecord() {
		return nil, false
	}
	size := align8(recordHeader + uint64(n))
	t := r.ptail
	off := t & r.mask
	pad := uint64(0)
	if toEnd := uint64(len(r.buf)) - off; size > toEnd {
		pad = toEnd
	}
	if t+pad+size-r.xhead > uint64(len(r.buf)) {
		r.xhead = r.head.Load()
		if t+pad+size-r.xhead > uint64(len(r.buf)) {
			return nil, false
		}
	}
	if pad > 0 {
		putHeader(r.buf[off:], uint32(pad-recordHeader), recordPad)
		t += pad
		off = 0
	}
	putHeader(r.buf[off:], uint32(n), 0)
	r.ptail = t + size
	return r.buf[off+recordHeader : off+recordHeader+uint64(n) : off+recordHeader+uint64(n)], true
}

func putHeader(b []byte, n, flags uint32) {
	binary.LittleEndian.PutUint32(b, n)
	binary.LittleEndian.PutUint32(b[4:], flags)
}

// Publish makes every record claimed so far visible to the consumer.
// Producer side.
func (r *Records) Publish() {
	if r.tail.Load() != r.ptail {
		storeRelease(&r.tail, r.ptail) // release: Next reads the records after it
	}
}

// Next returns the next published record (ok false when there is none). It
// stays valid until Release. Consumer side.
func (r *Records) Next() (rec []byte, ok bool) {
	for {
		if r.chead == r.xtail {
			r.xtail = r.tail.Load()
			if r.chead == r.xtail {
				return nil, false
			}
		}
		off := r.chead & r.mask
		n := uint64(binary.LittleEndian.Uint32(r.buf[off:]))
		flags := binary.LittleEndian.Uint32(r.buf[off+4:])
		r.chead += align8(recordHeader + n)
		if flags&recordPad == 0 {
			return r.buf[off+recordHeader : off+recordHeader+n : off+recordHeader+n], true
		}
	}
}

// Release frees the space of every record Next returned: the producer may
// overwrite them from now on. Consumer side.
func (r *Records) Release() {
	if r.head.Load() != r.chead {
		r.head.Store(r.chead)
	}
}

// Len returns how many bytes are published and not released (headers and
// padding included): 0 when the consumer has released everything.
func (r *Records) Len() int {
	h := r.head.Load() // before tail, so h <= t
	return int(r.tail.Load() - h)
}
