package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSoakSchedule(t *testing.T) {
	s := SoakSchedule(10*time.Minute, time.Minute, 10*time.Second, 4)
	require.Len(t, s, 18) // a kill and a restart at 1m .. 9m
	require.Equal(t, "kill:4@1m0s", s[0].String())
	require.Equal(t, "restart:4@9m10s", s[17].String())
	require.NoError(t, s.Check(5, []int{0, 1}, 10*time.Minute))
}

func TestParseRSS(t *testing.T) {
	kb, err := parseRSS(strings.NewReader("Name:\tx\nVmPeak:\t 100 kB\nVmRSS:\t   12345 kB\nThreads: 3\n"))
	require.NoError(t, err)
	require.Equal(t, int64(12345), kb)
	_, err = parseRSS(strings.NewReader("Name:\tx\n"))
	require.ErrorContains(t, err, "no VmRSS")
	_, err = parseRSS(strings.NewReader("VmRSS: 12 MB\n"))
	require.ErrorContains(t, err, "want N kB")
	kb, err = ReadRSS(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, kb)
}
