package engine

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/wire"
	"github.com/stretchr/testify/require"
)

const fuzzGroupID = 0x6e616b31

var fuzzIDs = []digest.Member{{ID: 0xf001, Inc: 1}, {ID: 0xf002, Inc: 1}}

// fuzzSeeds returns valid datagrams from member fuzzIDs[1] to the group of
// the fuzz member, and some broken ones.
func fuzzSeeds(t testing.TB) [][]byte {
	h := wire.Header{Group: fuzzGroupID, Sender: fuzzIDs[1]}
	view := digest.ViewID{Coord: fuzzIDs[0], Counter: 1}
	var out [][]byte
	add := func(b []byte, err error) {
		require.NoError(t, err)
		out = append(out, append([]byte(nil), b...))
	}
	var w wire.DataWriter
	buf := make([]byte, 2048)
	hd := h
	hd.Type = wire.TypeData
	require.NoError(t, w.Reset(buf, hd, fuzzIDs[1], 1))
	for _, p := range []string{"a", "bb", "ccc"} {
		require.True(t, w.Append([]byte(p)))
	}
	add(w.Finish(), nil)
	require.NoError(t, w.Reset(buf, hd, fuzzIDs[1], 5)) // a gap: triggers a NAK
	require.True(t, w.Append([]byte("after a gap")))
	add(w.Finish(), nil)
	add(wire.EncodeXmitReq(make([]byte, 512), h, view, fuzzIDs[0], 0, []wire.Range{{From: 1, To: 3}}))
	add(wire.EncodeStable(make([]byte, 512), h, view, wire.EntrySlice{{Member: fuzzIDs[1], Delivered: 2, Received: 3}}))
	add(wire.EncodeHighest(make([]byte, 512), h, wire.Highest{View: view, Highest: 9}))
	add(wire.EncodeHeartbeat(make([]byte, 512), h, wire.Heartbeat{View: view}))
	out = append(out, nil, []byte{1}, make([]byte, 24), []byte("not a nakcast datagram at all"))
	return out
}

// fuzzTarget is one member and a socket that sends to its unicast address;
// shared by every fuzz input of a process.
type fuzzTarget struct {
	m    *Member
	conn *net.UDPConn
}

var (
	fuzzOnce sync.Once
	fuzzT    *fuzzTarget
	fuzzErr  error
)

func getFuzzTarget() (*fuzzTarget, error) {
	fuzzOnce.Do(func() {
		m, err := Open(context.Background(), Config{
			Group:      testGroup(),
			Self:       fuzzIDs[0],
			Logger:     quietLogger(),
			Handler:    HandlerFunc(func(digest.Member, uint64, []byte) {}),
			Network:    NetworkConfig{GroupID: fuzzGroupID},
			Membership: MembershipConfig{Members: fuzzIDs},
		})
		if err != nil {
			fuzzErr = err
			return
		}
		conn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(m.LocalAddr()))
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzT = &fuzzTarget{m: m, conn: conn}
	})
	return fuzzT, fuzzErr
}

// FuzzReceive feeds datagrams to a running member through its unicast
// socket, raw or with the common header patched to this group and a view
// member (so that decoding goes past the header). Nothing may panic (a
// panic on the agent goroutine kills the process), and the member must
// keep running: each input is waited for until the agent has read it.
func FuzzReceive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, patch bool) {
		ft, err := getFuzzTarget()
		require.NoError(t, err)
		if patch && len(data) >= wire.HeaderLen {
			data[0] = wire.VersionMajor
			binary.LittleEndian.PutUint32(data[4:], fuzzGroupID)
			binary.LittleEndian.PutUint64(data[8:], fuzzIDs[1].ID)
			binary.LittleEndian.PutUint32(data[16:], fuzzIDs[1].Inc)
		}
		if len(data) > ft.m.cfg.MaxDatagram {
			data = data[:ft.m.cfg.MaxDatagram]
		}
		before := ft.m.ctr.datagramsIn.Load()
		_, err = ft.conn.Write(data)
		require.NoError(t, err)
		deadline := time.Now().Add(5 * time.Second)
		for ft.m.ctr.datagramsIn.Load() == before {
			require.True(t, time.Now().Before(deadline), "the agent stopped reading")
			runtime.Gosched()
		}
	})
}

// TestReceiveCountsMalformed checks that undecodable datagrams are counted
// as drops and change nothing else.
func TestReceiveCountsMalformed(t *testing.T) {
	ft, err := getFuzzTarget()
	require.NoError(t, err)
	before := ft.m.Stats()
	bad := [][]byte{{1}, make([]byte, 24), []byte("definitely not a datagram of ours")}
	for _, b := range bad {
		_, err := ft.conn.Write(b)
		require.NoError(t, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ft.m.Stats().Drops.Malformed < before.Drops.Malformed+uint64(len(bad)) {
		require.True(t, time.Now().Before(deadline), "malformed not counted: %+v", ft.m.Stats().Drops)
		runtime.Gosched()
	}
	require.Equal(t, before.Delivered, ft.m.Stats().Delivered)

	foreign := append([]byte(nil), fuzzSeeds(t)[0]...)
	foreign[4] ^= 0xff // another group id
	_, err = ft.conn.Write(foreign)
	require.NoError(t, err)
	for ft.m.Stats().Drops.ForeignGroup == before.Drops.ForeignGroup {
		require.True(t, time.Now().Before(deadline), "foreign group not counted: %+v", ft.m.Stats().Drops)
		runtime.Gosched()
	}
}
