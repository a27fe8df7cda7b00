package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/nakcast/nakcast/digest"
)

// entry is a key's winning write.
type entry struct {
	value   string
	deleted bool
	ts      uint64 // Lamport timestamp
	writer  uint64 // member id
}

// Store is the replicated map: an engine.Handler that applies every
// delivered write with last-writer-wins on (Lamport timestamp, writer id).
type Store struct {
	mu    sync.Mutex
	self  uint64
	clock uint64
	data  map[string]entry
	lost  int
}

// NewStore returns an empty store for member self.
func NewStore(self uint64) *Store { return &Store{self: self, data: map[string]entry{}} }

// SetSelf sets the writer id of this member's writes (the engine picks a
// random id when none is given).
func (s *Store) SetSelf(id uint64) {
	s.mu.Lock()
	s.self = id
	s.mu.Unlock()
}

// Encode returns the message for a write by this member:
// ts uint64, flags uint8 (1 = delete), key length uint16, key, value.
func (s *Store) Encode(key, value string, del bool) []byte {
	s.mu.Lock()
	s.clock++
	ts := s.clock
	s.mu.Unlock()
	b := make([]byte, 0, 11+len(key)+len(value))
	b = binary.LittleEndian.AppendUint64(b, ts)
	var fl byte
	if del {
		fl = 1
	}
	b = append(b, fl)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	return append(b, value...)
}

// Deliver applies one write (engine.Handler).
func (s *Store) Deliver(sender digest.Member, seq uint64, p []byte) {
	if len(p) < 11 {
		return
	}
	ts := binary.LittleEndian.Uint64(p)
	del := p[8] == 1
	kl := int(binary.LittleEndian.Uint16(p[9:]))
	if 11+kl > len(p) {
		return
	}
	key, val := string(p[11:11+kl]), string(p[11+kl:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = max(s.clock, ts)
	old, ok := s.data[key]
	if ok && (old.ts > ts || (old.ts == ts && old.writer >= sender.ID)) {
		return
	}
	s.data[key] = entry{value: val, deleted: del, ts: ts, writer: sender.ID}
}

// Lost counts ranges of writes that can never arrive (engine.Handler).
func (s *Store) Lost(sender digest.Member, from, to uint64) {
	s.mu.Lock()
	s.lost++
	s.mu.Unlock()
}

// WriteState writes the whole map and the Lamport clock (engine
// Config.Membership.GetState: state transfer to a joiner). Deleted keys are kept as
// tombstones so that an older write arriving later still loses.
func (s *Store) WriteState(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := binary.LittleEndian.AppendUint64(nil, s.clock)
	for _, k := range sortedKeys(s.data) {
		e := s.data[k]
		var fl byte
		if e.deleted {
			fl = 1
		}
		b = binary.LittleEndian.AppendUint64(b, e.ts)
		b = binary.LittleEndian.AppendUint64(b, e.writer)
		b = append(b, fl)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.value)))
		b = append(b, k...)
		b = append(b, e.value...)
	}
	_, err := w.Write(b)
	return err
}

// ReadState replaces the map with a state written by WriteState (engine
// Config.Membership.SetState).
func (s *Store) ReadState(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	bad := errors.New("kvstore: malformed state")
	if len(b) < 8 {
		return bad
	}
	clock := binary.LittleEndian.Uint64(b)
	data := map[string]entry{}
	for b = b[8:]; len(b) > 0; {
		if len(b) < 23 {
			return bad
		}
		ts, writer, del := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), b[16] == 1
		kl, vl := int(binary.LittleEndian.Uint16(b[17:])), int(binary.LittleEndian.Uint32(b[19:]))
		b = b[23:]
		if kl+vl > len(b) {
			return bad
		}
		data[string(b[:kl])] = entry{value: string(b[kl : kl+vl]), deleted: del, ts: ts, writer: writer}
		b = b[kl+vl:]
	}
	s.mu.Lock()
	s.clock, s.data = max(s.clock, clock), data
	s.mu.Unlock()
	return nil
}

func sortedKeys(m map[string]entry) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Get returns a key's value.
func (s *Store) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[key]
	if !ok || e.deleted {
		return "", false
	}
	return e.value, true
}

// Dump returns "key=value" for every live key, sorted.
func (s *Store) Dump() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, e := range s.data {
		if !e.deleted {
			out = append(out, fmt.Sprintf("%s=%s", k, e.value))
		}
	}
	sort.Strings(out)
	return out
}
