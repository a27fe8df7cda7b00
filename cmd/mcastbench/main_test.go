package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBadFlagsExit2NamingTheFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "-1s"}, "-duration"},
		{[]string{"-sizes", "8"}, "-sizes"},
		{[]string{"-nosuchflag"}, "nosuchflag"},
		{[]string{"throughput", "-members", "0"}, "-members"},
		{[]string{"throughput", "-idle", "nap"}, "-idle"},
		{[]string{"throughput", "-loss", "1.5"}, "-loss"},
		{[]string{"throughput", "-group", "10.1.2.3:5000"}, "-group"},
		{[]string{"throughput", "-transport", "tcp"}, "-transport"},
		{[]string{"latency", "-count", "0"}, "-count"},
		{[]string{"raw", "-receivers", "0"}, "-receivers"},
		{[]string{"member"}, "-group"},
		{[]string{"netns", "-mtu", "10"}, "-mtu"},
		{[]string{"bogus"}, "unknown mode"},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tt.args, &out, &errOut))
			require.Contains(t, errOut.String(), tt.want)
		})
	}
}

func TestXDPRefusedWithReason(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"throughput", "-transport", "xdp"}, &out, &errOut))
	require.Contains(t, errOut.String(), "AF_XDP backend is not available yet")
}

func TestHelpExits0(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"throughput", "-h"}, &out, &errOut))
	require.Contains(t, errOut.String(), "-bundle-bytes")
}

func TestThroughputShortRun(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"throughput", "-count", "2000", "-members", "2"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	require.Contains(t, out.String(), "nakcast")
	require.Contains(t, out.String(), "yes")
}
