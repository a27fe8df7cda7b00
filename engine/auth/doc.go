// Package auth seals and verifies nakcast datagrams with a group key: an
// AES-GCM tag over header and body (wire/FORMAT.md, "Authentication
// trailer"), optionally encrypting the body, with per-sender nonces that
// never repeat under a key, a per-sender replay window and key rotation by
// key id.
//
// It owns the cryptography and the per-sender state of authentication:
// keys and their derivation, nonce allocation, tags, replay windows. The
// byte layout it fills (flags, key id, trailer) is wire's; when to seal and
// verify is the engine's. It must not decode anything beyond the common
// header or keep protocol state: a datagram it accepts is authentic and
// fresh, nothing more.
//
// # Why here
//
// Verification is the engine's job (wire only fixes the layout): it needs
// keys, a clock for the derivation budget and per-sender state, none of
// which belongs in wire, and it must run before the engine's address
// learning and before gms or nakack see a datagram, so it sits at the
// engine's receive and write points. It is a package of its own, below
// engine, so that the agent calls it at two points (Sealer in the write
// path, Verifier in the receive path) and tests and fuzzers reach it
// without sockets.
//
// # Keys and subkeys
//
// A Key is a key id (non-zero, in the header) and a 16- or 32-byte secret
// (AES-128 or AES-256). Nothing seals under the group secret itself: each
// sender incarnation (member id and incarnation, the header's sender) seals
// under its own subkey, HKDF-SHA256(secret, info = "nakcast/1 datagram" ||
// group id || key id || member id || incarnation), as long as the secret.
// A receiver derives the same subkey from the authenticated header fields.
//
// # Nonces never repeat
//
// The 12-byte AES-GCM nonce is a 4-byte salt and an 8-byte counter, whose
// top bit names the datagram's path (Path: to the group or to one member's
// unicast address) and whose other 63 bits are a count. A subkey belongs to
// one (group, key, member id, incarnation), so a nonce can only repeat if
// one of those is used by two seals with the same salt and counter. Within a
// process every seal takes the next count of its path from one
// process-wide source (NonceSource), whatever member, incarnation or key:
// no two seals of a process on one path share a count, and the path bit
// keeps the two paths' counters apart, so no two seals share a counter (a
// sealer refuses a count that reaches the bit, ErrCountersExhausted, so a
// count never sets it). Each path counts on its own so that its counts
// stay dense: a repair flood on the unicast path does not spread the group
// path's counts beyond its replay window (see "Replay window"). Across
// processes each path's count starts at the wall clock in nanoseconds when
// the process starts, so a restart begins above every count its
// predecessor used: a process seals far fewer than one datagram per
// nanosecond (the machines here move at most some 10^6 datagrams a
// second), so its counts stay behind the clock. That is what makes a
// restart safe for the members whose incarnation does not change across
// processes: a static member keeps Config.Self as given, and
// gms, which takes a new incarnation (so a new subkey) on every join attempt
// within a process, counts them from 1 again in a new one, so a dynamic
// member restarted with a fixed Config.Self.ID reuses its first incarnations
// too. The salt is random per process: if the wall clock steps back across a
// restart, or two processes run with the same member and incarnation (a
// configuration error), a repeat additionally needs the same 32-bit salt.
//
// A receiver's replay windows follow the count, so a sender restarted
// after its clock stepped back by more than its previous run sealed is
// taken for a replay until the clock catches up: it fails safe (drops,
// counted as TooOld), never by accepting a replay.
//
// # Replay window
//
// Each sender (member id and incarnation) that sent an authenticated
// datagram has, for each path, a sliding bitmap of WindowSize counts: a
// count above the highest seen on that path is new, one inside the window
// new unless its bit is set (Replay), one below it TooOld. The path comes
// from the counter, which the tag covers: a replay lands in the window it
// was first accepted by, whatever socket it arrives on. The window moves
// only on a datagram whose tag verified, so a forgery cannot push it.
//
// The windows are per path because the paths reorder: a receiver reads
// the group's datagrams and the unicast ones (a STABLE, the coordinator's
// STABILITY) from two sockets, so a unicast datagram overtakes every group
// datagram still queued in the group socket, and a group datagram can
// overtake unicast ones waiting for the next read of the unicast socket.
// Under load the group socket holds thousands of datagrams, and under loss
// each stands for more counts than one (the lost ones were sealed too): no
// window over one counter space covers that. Within a path a sender's
// datagrams travel as one flow and are read from one socket, sealed in the
// order written (the engine seals just before the write), so a window only
// has to absorb the reordering of one flow: deeper on Linux's virtual
// devices than on a wire (WindowSize says why it is as large as it is).
//
// Memory is bounded: at most MaxSenders senders (2 KiB of windows each),
// the least recently heard forgotten first. A receiver restarted (or one
// that forgot a sender) accepts one earlier copy of a sender's datagrams;
// the protocol's view ids and seqnos drop what is stale.
//
// # Rotation
//
// A Keyring holds up to MaxKeys keys: the first seals, all verify. Rotation
// is three steps on every member: add the new key behind the current one
// ([old, new]: everyone can verify it), make it current ([new, old]:
// senders move; what is in flight under old still verifies), then drop the
// old one ([new]: old datagrams fail as UnknownKey).
//
// # Cost
//
// Sealing and verifying do not allocate: the AEAD instances of the own and
// of each known sender's subkey are kept, tags are computed over the
// datagram in place, an encrypted body is encrypted out of place into the
// buffer the engine writes (the sender's retention buffer keeps the
// plaintext) and decrypted in place on receipt. Deriving a subkey
// allocates; it happens once per sender incarnation and key, and a
// derivation for a sender not yet known is rationed (DeriveBurst, DeriveRate)
// so that forgeries naming random senders cannot buy unbounded CPU.
package auth
