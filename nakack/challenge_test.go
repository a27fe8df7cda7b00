package nakack

import (
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

// forgedNotFound is a MSG_NOT_FOUND that claims to come from sender, for
// requester, with purge point low: what a stranger that spoofs the
// sender's address sends.
func forgedNotFound(t *testing.T, view digest.ViewID, sender, requester digest.Member, low, highest uint64) dgram {
	b := make([]byte, 1400)
	d, err := wire.EncodeMsgNotFound(b, wire.Header{Group: testGroup, Sender: sender}, view, requester,
		rg(1, low), low, highest, wire.EntrySlice{{Member: sender, Low: low, Delivered: highest, Received: highest}})
	require.NoError(t, err)
	return dgram{from: sender, to: requester, typ: wire.TypeMsgNotFound, data: d}
}

// gapAtA has B send 1..201 and A receive only 1..50 and 201: A lacks
// 51..200, which B still holds.
func gapAtA(t *testing.T, tweak func(*Config)) *cluster {
	c := newCluster(t, func(cfg *Config) {
		cfg.MaxBundle = 10
		if tweak != nil {
			tweak(cfg)
		}
	}, mB, mA)
	for _, d := range c.send(mB, false, payloads("b", 1, 201)...) {
		if _, _, last := dataRange(t, d); last <= 50 || last == 201 {
			c.deliverTo(d, mA)
		}
	}
	c.poll()
	return c
}

// TestSpoofedMsgNotFoundNeverSkips: a MSG_NOT_FOUND that claims B's
// identity (as a stranger spoofing B's address would send it) while B
// still holds the seqnos: A challenges B, B does not echo, A reports
// nothing lost and repairs the gap from B; after ChallengeAttempts
// unanswered challenges it gives the claim up.
func TestSpoofedMsgNotFoundNeverSkips(t *testing.T) {
	c := gapAtA(t, nil)
	c.deliverTo(forgedNotFound(t, c.view.ID, mB, mA, 150, 201), mA)
	out := c.take()
	require.Len(t, ofType(out, wire.TypeChallenge), 1, "A challenges the claimed sender")
	require.Equal(t, mB, ofType(out, wire.TypeChallenge)[0].to, "by unicast to B")
	c.deliver(out, nil)
	c.run(c.now+5*time.Second, nil)
	require.Empty(t, c.rec(mA).lost)
	require.Equal(t, span(1, 201), c.rec(mA).seqs(mB))
	a, b := c.p(mA).Stats(), c.p(mB).Stats()
	require.Zero(t, a.NotFoundConfirmed)
	require.Equal(t, uint64(1), a.ChallengesExpired)
	require.Equal(t, uint64(3), a.ChallengesSent, "ChallengeAttempts")
	require.Equal(t, uint64(3), b.ChallengesRefused)
	require.Zero(t, b.ChallengesAnswered)
	require.Zero(t, c.nodes[mA].log.n, "nothing logged")
}

// TestMsgNotFoundConfirmedByEcho: seed 000's MSG_NOT_FOUND is acted on
// once B echoes the challenge, not before; an echo with another nonce, or
// from another member, confirms nothing.
func TestMsgNotFoundConfirmedByEcho(t *testing.T) {
	c, rep, mnf := seed000(t, false)
	c.deliverTo(mnf, mA)
	for _, d := range rep {
		c.deliverTo(d, mA)
	}
	c.poll()
	require.Empty(t, c.rec(mA).lost, "nothing skipped before B confirms")
	out := c.take()
	chals := ofType(out, wire.TypeChallenge)
	require.Len(t, chals, 1)
	h, body, err := wire.DecodeHeader(chals[0].data, testGroup)
	require.NoError(t, err)
	ch, err := wire.DecodeChallenge(h, body)
	require.NoError(t, err)
	require.Equal(t, wire.ChallengeNotFound, ch.Kind)
	require.Equal(t, []wire.Range{rg(51, 150)}, ch.Ranges.AppendTo(nil))

	echo := func(from digest.Member, nonce uint64) dgram {
		b := make([]byte, 200)
		d, err := wire.EncodeChallenge(b, wire.Header{Group: testGroup, Sender: from}, wire.TypeEcho, ch.View, ch.Target, nonce, ch.Kind, ch.Ranges)
		require.NoError(t, err)
		return dgram{from: from, to: mA, typ: wire.TypeEcho, data: d}
	}
	c.deliverTo(echo(mB, ch.Nonce+1), mA)
	c.deliverTo(echo(mC, ch.Nonce), mA)
	c.poll()
	require.Empty(t, c.rec(mA).lost)
	require.Equal(t, uint64(2), c.p(mA).Stats().EchoesIgnored)
	c.deliverTo(echo(mB, ch.Nonce), mA)
	c.poll()
	require.Equal(t, []lostEvent{{mB, 51, 150}}, c.rec(mA).lostOf(mB))
	require.Equal(t, uint64(1), c.p(mA).Stats().NotFoundConfirmed)
	c.run(c.now+5*time.Second, nil)
	require.Equal(t, cat(span(1, 50), span(151, 201)), c.rec(mA).seqs(mB))
	require.Equal(t, 1, c.nodes[mA].log.n, "logged once")
}

// TestChallengeResentUntilEcho: a lost challenge (or echo) is sent again
// every ChallengeTimeout; after ChallengeAttempts the claim is given up,
// and the next MSG_NOT_FOUND (B answers A's next request) starts again.
func TestChallengeResentUntilEcho(t *testing.T) {
	c, _, mnf := seed000(t, false)
	c.deliverTo(mnf, mA)
	dropEchoes := 5 // all three challenges of the first claim, two of the second
	c.run(c.now+5*time.Second, func(d dgram, to digest.Member) bool {
		if d.typ == wire.TypeEcho && to == mA && dropEchoes > 0 {
			dropEchoes--
			return true
		}
		return false
	})
	a := c.p(mA).Stats()
	require.Equal(t, uint64(1), a.ChallengesExpired)
	require.Equal(t, uint64(1), a.NotFoundConfirmed)
	require.Equal(t, []lostEvent{{mB, 51, 150}}, c.rec(mA).lostOf(mB))
	require.Equal(t, cat(span(1, 50), span(151, 201)), c.rec(mA).seqs(mB))
}

// TestLowerClaimReplacesPending: while a challenge is pending, a claim of
// a higher purge point is ignored and a lower one replaces it, so that a
// stranger's inflated claim never holds up the sender's true one.
func TestLowerClaimReplacesPending(t *testing.T) {
	c, _, mnf := seed000(t, false)
	c.deliverTo(forgedNotFound(t, c.view.ID, mB, mA, 190, 201), mA)
	require.Len(t, ofType(c.take(), wire.TypeChallenge), 1)
	c.deliverTo(forgedNotFound(t, c.view.ID, mB, mA, 195, 201), mA)
	require.Empty(t, ofType(c.take(), wire.TypeChallenge), "a higher claim waits")
	c.deliverTo(mnf, mA) // B's own: low 150
	out := c.take()
	require.Len(t, ofType(out, wire.TypeChallenge), 1, "the lower claim replaces the pending one")
	c.deliver(out, nil)
	c.run(c.now+5*time.Second, nil)
	require.Equal(t, []lostEvent{{mB, 51, 150}}, c.rec(mA).lostOf(mB))
	require.Equal(t, cat(span(1, 50), span(151, 201)), c.rec(mA).seqs(mB))
}

// TestAuthenticatedMsgNotFoundActsAtOnce: with Config.Authenticated (the
// driver checked the datagram's tag) no challenge is sent.
func TestAuthenticatedMsgNotFoundActsAtOnce(t *testing.T) {
	c, rep, mnf := seed000(t, false)
	c.p(mA).cfg.Authenticated = true
	c.deliverTo(mnf, mA)
	for _, d := range rep {
		c.deliverTo(d, mA)
	}
	c.poll()
	require.Equal(t, []lostEvent{{mB, 51, 150}}, c.rec(mA).lostOf(mB))
	require.Empty(t, ofType(c.take(), wire.TypeChallenge))
}

// TestMsgNotFoundForAnotherRequester: a MSG_NOT_FOUND addressed to another
// member changes nothing here.
func TestMsgNotFoundForAnotherRequester(t *testing.T) {
	c := gapAtA(t, nil)
	d := forgedNotFound(t, c.view.ID, mB, mC, 150, 201)
	d.to = mA
	c.deliverTo(d, mA)
	require.Empty(t, c.take())
	require.Equal(t, uint64(1), c.p(mA).Stats().MsgNotFoundIgnored)
}

// TestChallengeFromStranger: B answers challenges only from members of its
// view, about its own seqnos.
func TestChallengeFromStranger(t *testing.T) {
	c, _, _ := seed000(t, false)
	chal := func(from, target digest.Member) dgram {
		b := make([]byte, 200)
		d, err := wire.EncodeChallenge(b, wire.Header{Group: testGroup, Sender: from}, wire.TypeChallenge,
			c.view.ID, target, 99, wire.ChallengeNotFound, wire.RangeSlice{rg(51, 150)})
		require.NoError(t, err)
		return dgram{from: from, to: mB, typ: wire.TypeChallenge, data: d}
	}
	c.deliverTo(chal(mD, mB), mB)
	c.deliverTo(chal(mA, mC), mB)
	require.Empty(t, c.take())
	require.Equal(t, uint64(2), c.p(mB).Stats().Drops.Stranger)
	c.deliverTo(chal(mA, mB), mB)
	require.Len(t, ofType(c.take(), wire.TypeEcho), 1)
}
