package auth

// WindowSize is the span of counts a replay window tracks behind the
// highest one seen on its path: reordering deeper than that (a datagram
// overtaken by datagrams of the same sender and path sealed more than
// about WindowSize-64 counts after it) reads as TooOld. A path's counts
// are its own (NonceSource.Next), so on the group path the span is the
// sender process's group datagrams, the ones the receiver lost included.
// Linux's virtual devices reorder one flow far deeper than a wire does
// (likely a sender that moves between CPUs, whose datagrams wait in two
// CPUs' receive backlogs, drained independently): on a loaded veth bridge
// by some thousands of datagrams (docs/security.md has the figures). The
// window is sized for several times that, at 1 KiB a path and sender.
const WindowSize = windowWords * 64

const windowWords = 128

// Window is a sliding bitmap over one sender's nonce counters (RFC 6479's
// shape: a ring of words, cleared a word at a time as the top moves).
// Check says whether a counter would be accepted; Mark records it. Check
// and Mark are split so that a datagram's counter is looked at before its
// tag is verified and recorded only after.
type Window struct {
	top  uint64 // highest counter marked; 0: none yet
	bits [windowWords]uint64
}

// Check returns OK for a counter not seen yet and inside or above the
// window, Replay for one already marked, TooOld for one below the window
// (counter 0 included: senders never use it).
func (w *Window) Check(c uint64) Reason {
	switch {
	case c > w.top:
		return OK
	case c == 0 || w.top/64-c/64 >= windowWords:
		return TooOld
	case w.bits[(c/64)%windowWords]&(1<<(c%64)) != 0:
		return Replay
	}
	return OK
}

// Mark records c, sliding the window up when c is above the top. The
// caller has checked c (Check returned OK).
func (w *Window) Mark(c uint64) {
	if c > w.top {
		tw, cw := w.top/64, c/64
		if cw-tw >= windowWords || w.top == 0 {
			clear(w.bits[:])
		} else {
			for i := tw + 1; i <= cw; i++ {
				w.bits[i%windowWords] = 0
			}
		}
		w.top = c
	}
	w.bits[(c/64)%windowWords] |= 1 << (c % 64)
}

// Top returns the highest counter marked (0: none).
func (w *Window) Top() uint64 { return w.top }
