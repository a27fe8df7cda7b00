package bench

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests use their own groups (239.77.60.x) so that they never see the
// datagrams of another test or package running at the same time.
func testGroup(last byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{239, 77, 60, last}), 0)
}

func TestRunRawMessagesFlow(t *testing.T) {
	d := rawFlowDuration
	for _, size := range []int{64, 1024} {
		t.Run(byteSize(size), func(t *testing.T) {
			res, err := RunRaw(context.Background(), RawConfig{Group: testGroup(1), MsgSize: size, Duration: d, Receivers: 2})
			require.NoError(t, err)
			t.Logf("%s: %+v", byteSize(size), res)
			require.Positive(t, res.Msgs)
			require.Positive(t, res.Datagrams)
			require.Positive(t, res.MsgsPerSec)
			require.Positive(t, res.Checksum)
			require.Zero(t, res.Malformed)
			require.LessOrEqual(t, res.Msgs, res.SentMsgs)
			require.Equal(t, int64(size)*res.Msgs, res.Bytes)
			require.Equal(t, msgsPerDatagram(65507, size), res.MsgsPerDatagram)
			require.GreaterOrEqual(t, res.Elapsed, time.Duration(0))
		})
	}
}

func TestRunRawCountDeliversEverything(t *testing.T) {
	// 3000 KiB messages are 48 datagrams, far less than the receive
	// buffer: nothing can be lost even if the receiver is slow.
	const count = 3000
	res, err := RunRaw(context.Background(), RawConfig{Group: testGroup(2), MsgSize: 1024, Count: count, Batch: 4})
	require.NoError(t, err)
	require.Equal(t, int64(count), res.SentMsgs)
	require.Equal(t, int64(count), res.Msgs)
	require.Equal(t, int64(48), res.SentDatagrams)
	require.Equal(t, res.SentDatagrams, res.Datagrams)
	require.Zero(t, res.LossPct)
	require.Equal(t, uint64(count*(count-1)/2), res.Checksum, "every message's stamped number read once")
}

func TestRunRawCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := RunRaw(ctx, RawConfig{Group: testGroup(3), Duration: time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(8), res.SentDatagrams, "one batch, then the cancelled context stops the sender")
}

func TestRawConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   RawConfig
		field string
	}{
		{"message larger than datagram", RawConfig{MsgSize: 2000, DatagramSize: 1472}, "MsgSize"},
		{"negative message", RawConfig{MsgSize: -1}, "MsgSize"},
		{"datagram too large", RawConfig{DatagramSize: 65508}, "DatagramSize"},
		{"datagram too small", RawConfig{DatagramSize: 10}, "DatagramSize"},
		{"negative count", RawConfig{Count: -1}, "Count"},
		{"negative duration", RawConfig{Duration: -time.Second}, "Duration"},
		{"batch too large", RawConfig{Batch: 5000}, "Batch"},
		{"no receivers", RawConfig{Receivers: -1}, "Receivers"},
		{"unsafe group", RawConfig{Group: netip.MustParseAddrPort("224.0.0.1:5000")}, "Group"},
		{"non-loopback interface", RawConfig{Interface: "nakcast-none0"}, "Interface"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RunRaw(context.Background(), tt.cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.field)
		})
	}
}

func TestFillParseRaw(t *testing.T) {
	buf := make([]byte, 1472)
	payload := make([]byte, 100)
	tests := []struct {
		name string
		size int
		n    int
	}{
		{"full datagram", 100, msgsPerDatagram(1472, 100)},
		{"one message", 100, 1},
		{"short messages not stamped", 5, 3},
		{"empty datagram", 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := fillRaw(buf, 7, 1000, tt.n, payload[:tt.size])
			seq, msgs, bytes, sum, err := parseRaw(d)
			require.NoError(t, err)
			require.Equal(t, uint64(7), seq)
			require.Equal(t, tt.n, msgs)
			require.Equal(t, tt.n*tt.size, bytes)
			if tt.size >= 8 {
				require.Equal(t, uint64(tt.n*1000+tt.n*(tt.n-1)/2), sum)
			}
		})
	}
	good := fillRaw(buf, 1, 0, 3, payload[:10])
	bad := []struct {
		name string
		b    []byte
		err  error
	}{
		{"no header", good[:5], ErrRawTruncated},
		{"cut in a length", good[:rawHeaderLen+1], ErrRawTruncated},
		{"cut in a message", good[:len(good)-1], ErrRawTruncated},
		{"count too high", func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint16(b[8:], 4)
			return b
		}(), ErrRawCount},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, _, err := parseRaw(tt.b)
			require.ErrorIs(t, err, tt.err)
		})
	}
}

func TestFillParseRawAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	buf := make([]byte, 65507)
	payload := make([]byte, 64)
	n := msgsPerDatagram(len(buf), len(payload))
	allocs := testing.AllocsPerRun(100, func() {
		d := fillRaw(buf, 1, 0, n, payload)
		if _, m, _, _, err := parseRaw(d); err != nil || m != n {
			t.Fatal(m, err)
		}
	})
	require.Zero(t, allocs)
}

func FuzzParseRaw(f *testing.F) {
	buf := make([]byte, 2048)
	f.Add(append([]byte(nil), fillRaw(buf, 1, 0, 3, make([]byte, 64))...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, msgs, bytes, _, err := parseRaw(b)
		if err != nil {
			return
		}
		// A datagram that parses is exactly its header, prefixes and
		// messages, and says how many messages it holds.
		require.Equal(t, binary.LittleEndian.Uint64(b), seq)
		require.Equal(t, rawHeaderLen+msgs*rawLenPrefix+bytes, len(b))
		require.Equal(t, int(binary.LittleEndian.Uint16(b[8:])), msgs)
	})
}

func byteSize(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
