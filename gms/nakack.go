package gms

import (
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
	"github.com/nakcast/nakcast/wire"
)

// NakackProtocol adapts a *nakack.Protocol to Protocol, for the engine and
// the simulator.
type NakackProtocol struct {
	P    *nakack.Protocol
	gaps []wire.Range       // scratch for SenderState
	lags []nakack.MemberLag // scratch for AppendLags
}

// InstallView implements Protocol.
func (a *NakackProtocol) InstallView(v View, joinDigest digest.Digest, now time.Duration) {
	a.P.InstallView(nakack.View{ID: v.ID, Members: v.IDs()}, joinDigest, now)
}

// InstallMergeView implements Protocol.
func (a *NakackProtocol) InstallMergeView(v View, d digest.Digest, now time.Duration) {
	a.P.InstallMergeView(nakack.View{ID: v.ID, Members: v.IDs()}, d, now)
}

// Digest implements Protocol.
func (a *NakackProtocol) Digest() digest.Digest { return a.P.Digest() }

// CaptureDigest implements Protocol.
func (a *NakackProtocol) CaptureDigest(now time.Duration) (uint64, digest.Digest) {
	id, d := a.P.CaptureDigest("gms", now)
	return uint64(id), d
}

// CaptureMergeDigest implements Protocol.
func (a *NakackProtocol) CaptureMergeDigest(now time.Duration) (uint64, digest.Digest) {
	id, d := a.P.CaptureMergeDigest("gms merge", now)
	return uint64(id), d
}

// ReleaseCapture implements Protocol.
func (a *NakackProtocol) ReleaseCapture(id uint64, now time.Duration) {
	a.P.ReleaseCapture(nakack.CaptureID(id))
}

// CheckOverwrite implements Protocol.
func (a *NakackProtocol) CheckOverwrite(d digest.Digest) error { return a.P.CheckOverwrite(d) }

// OverwriteDigest implements Protocol.
func (a *NakackProtocol) OverwriteDigest(d digest.Digest, now time.Duration) error {
	return a.P.OverwriteDigest(d, now)
}

// SenderState implements Protocol: the window's delivered and received
// values and its missing ranges (nakack Gaps).
func (a *NakackProtocol) SenderState(sender digest.Member, gaps []Range) (uint64, uint64, []Range, bool) {
	e, ok := a.P.WindowState(sender)
	if !ok {
		return 0, 0, gaps, false
	}
	a.gaps = a.P.Gaps(sender, a.gaps[:0])
	for _, g := range a.gaps {
		gaps = append(gaps, Range{From: g.From, To: g.To})
	}
	return e.Delivered, e.Received, gaps, true
}

// Unheld implements Protocol.
func (a *NakackProtocol) Unheld(sender digest.Member, dst []Range) []Range {
	if e, ok := a.P.WindowState(sender); ok && e.Low > 0 {
		dst = append(dst, Range{From: 1, To: e.Low})
	}
	a.gaps = a.P.Unheld(sender, a.gaps[:0])
	return append(dst, a.gaps...)
}

// ClosedWindow implements Protocol.
func (a *NakackProtocol) ClosedWindow(sender digest.Member) (uint64, bool) {
	return a.P.ClosedWindow(sender)
}

// PurgeCut implements Protocol.
func (a *NakackProtocol) PurgeCut(sender digest.Member, stable uint64, now time.Duration) {
	_, _ = a.P.PurgeCut(sender, stable, now) // refused as CompleteCut is: not departed
}

// CompleteCut implements Protocol.
func (a *NakackProtocol) CompleteCut(sender digest.Member, cut uint64, lost []Range, now time.Duration) {
	if a.P.CompleteCut(sender, cut, now) != nil {
		return
	}
	for _, r := range lost {
		_, _ = a.P.DeclareLost(sender, r.From, r.To, now)
	}
}

// CutPending reports whether nakack still has to report something of
// sender up to its cut (a fragmented message the cut ends inside): the
// survivor does not acknowledge the cut before (cutPender).
func (a *NakackProtocol) CutPending(sender digest.Member) bool { return a.P.CutPending(sender) }

// Consumed reports how far the application has consumed sender's stream,
// delivered or told lost (cutConsumer).
func (a *NakackProtocol) Consumed(sender digest.Member) uint64 {
	c, _ := a.P.Consumed(sender)
	return c
}

// CloseWindow implements Protocol.
func (a *NakackProtocol) CloseWindow(sender digest.Member, now time.Duration) {
	_, _ = a.P.CloseWindow(sender)
}

// CutBlocked reports whether sender's window can take nothing more below
// its cut until its stable point rises (cutBlocker).
func (a *NakackProtocol) CutBlocked(sender digest.Member) bool { return a.P.CutBlocked(sender) }
