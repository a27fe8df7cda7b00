package gms

import (
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/nakack"
)

// NakackProtocol adapts a *nakack.Protocol to Protocol, for the engine and
// the simulator.
//
// Limitation: nakack does not expose a window's missing ranges, so
// SenderState reports none; the coordinator then never declares a range
// lost by itself (safe: survivors keep fetching; a range no survivor holds
// keeps the cut open until nakack exposes its gaps).
type NakackProtocol struct {
	P *nakack.Protocol
	// OverwriteErrors counts OverwriteDigest calls that could not rewind a
	// window (purged below the digest).
	OverwriteErrors uint64
}

// InstallView implements Protocol.
func (a *NakackProtocol) InstallView(v View, joinDigest digest.Digest, now time.Duration) {
	a.P.InstallView(nakack.View{ID: v.ID, Members: v.IDs()}, joinDigest, now)
}

// Digest implements Protocol.
func (a *NakackProtocol) Digest() digest.Digest { return a.P.Digest() }

// CaptureDigest implements Protocol.
func (a *NakackProtocol) CaptureDigest(now time.Duration) (uint64, digest.Digest) {
	id, d := a.P.CaptureDigest("gms", now)
	return uint64(id), d
}

// ReleaseCapture implements Protocol.
func (a *NakackProtocol) ReleaseCapture(id uint64, now time.Duration) {
	a.P.ReleaseCapture(nakack.CaptureID(id))
}

// MergeDigest implements Protocol.
func (a *NakackProtocol) MergeDigest(d digest.Digest, now time.Duration) { a.P.MergeDigest(d, now) }

// OverwriteDigest implements Protocol.
func (a *NakackProtocol) OverwriteDigest(d digest.Digest, now time.Duration) {
	if a.P.OverwriteDigest(d, now) != nil {
		a.OverwriteErrors++
	}
}

// SenderState implements Protocol (without gaps: see the type comment).
func (a *NakackProtocol) SenderState(sender digest.Member, gaps []Range) (uint64, uint64, []Range, bool) {
	e, ok := a.P.WindowState(sender)
	return e.Delivered, e.Received, gaps, ok
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

// CloseWindow implements Protocol.
func (a *NakackProtocol) CloseWindow(sender digest.Member, now time.Duration) {
	_, _ = a.P.CloseWindow(sender)
}
