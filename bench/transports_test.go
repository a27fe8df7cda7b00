package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTransportMedians(t *testing.T) {
	ss := []TransportSample{
		{MsgsPerSec: 3, RecvCPUNs: 10, PingP50Ns: 7, Verified: true},
		{MsgsPerSec: 1, RecvCPUNs: 30, PingP50Ns: 9, Verified: true},
		{MsgsPerSec: 2, RecvCPUNs: 20, PingP50Ns: 8, Verified: false},
	}
	m := medianSample(ss)
	require.Equal(t, 2.0, m.MsgsPerSec)
	require.Equal(t, 20.0, m.RecvCPUNs)
	require.Equal(t, int64(8), m.PingP50Ns)
	require.False(t, m.Verified, "one run not verified")
	var b strings.Builder
	require.NoError(t, WriteTransportTable(&b, []TransportFigures{
		{Transport: "xdp", Mode: "native", Median: TransportSample{MsgsPerSec: 3e6, RecvCPUNs: 1000, PingP50Ns: 8000, PingP99Ns: 20000}},
		{Transport: "udp", Median: TransportSample{MsgsPerSec: 2e6, RecvCPUNs: 2000, PingP50Ns: 10000, PingP99Ns: 40000}},
	}))
	require.Contains(t, b.String(), "xdp vs udp: msgs/s 1.50x")
	require.Contains(t, b.String(), "recv CPU/datagram 0.50x")
	require.Contains(t, b.String(), "ping p50 0.80x")
}
