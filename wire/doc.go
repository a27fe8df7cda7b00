// Package wire owns the binary format of every nakcast datagram: the common
// header, the data messages (bundles of a contiguous run of seqnos, and
// fragments), the NAKACK control messages (XMIT_REQ, MSG_NOT_FOUND, STABLE,
// STABILITY, HIGHEST, HEARTBEAT), the CHALLENGE and ECHO that confirm an
// address or a MSG_NOT_FOUND with a fresh nonce, the layout of the
// authentication trailer,
// and the refcounted, pooled buffers that hold datagrams.
//
// The layout is fixed and little-endian; FORMAT.md beside this file describes
// every message byte by byte. Decoders work in place: they validate every
// length and count against the datagram, never copy a payload and never
// allocate; decoded messages (Data, RangeList, DigestView, Frag.Payload) are
// views into the datagram and live as long as its buffer. Encoders write into
// a caller's buffer and fail with ErrShortBuffer rather than grow it. Nothing
// in the package panics on any input; the only panic is a Buffer released
// more often than it was retained (a programming error, see Buffer).
//
// The package must not do I/O, read the clock, hold protocol rules (what a
// stale request is, what to do with a MSG_NOT_FOUND: that is nakack/), or
// verify authentication tags (the trailer layout is fixed here; sealing and
// opening belong to the engine, engine/auth, keyed by the header's key id).
//
// # Versions and compatibility
//
// Byte 0 of every datagram is the major version, byte 1 the minor version
// (this package writes VersionMajor.VersionMinor = 1.1). The rule:
//
//   - A datagram whose major version differs from VersionMajor is dropped with
//     ErrVersion before anything else is read: a new major may change every
//     byte after byte 0, including the header length.
//   - A datagram of the same major and any minor is decoded. Byte 22-23 of the
//     common header holds the header length: the common header plus the
//     type-specific fixed part. A newer minor may append fields to that fixed
//     part only (never in the middle, never in the variable part); a receiver
//     reads the fixed fields it knows and skips to the header length to find
//     the variable part, ignoring the bytes in between. A header length below
//     the 1.0 size of the type's fixed part is ErrMalformed.
//   - A newer minor may define new message types; a receiver drops a type it
//     does not know with ErrUnknownType, so new types must be ones an older
//     member can safely miss. Types 16..31 (membership) and 32..39 (state
//     transfer) are reserved: DecodeHeader accepts them and leaves their
//     bodies to their owners.
//   - Flag bits a receiver does not know are ignored (senders set only the
//     flags defined for the minor they write, and a flag whose meaning an
//     older member must not ignore needs a new major).
//   - Anything that an older minor could not skip this way (a changed field,
//     a changed element size in a list, a different trailer) needs a new
//     major, and with it a rolling upgrade runs two groups side by side.
package wire
