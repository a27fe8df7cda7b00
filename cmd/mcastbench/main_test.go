package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/bench"
)

// asMainEnv makes the test binary run the command instead of the tests:
// netns mode starts os.Executable() as its member processes.
const asMainEnv = "MCASTBENCH_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

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
		{[]string{"throughput", "-batch", "5000"}, "-batch"},
		{[]string{"netns", "-batch", "-1"}, "-batch"},
		{[]string{"latency", "-count", "0"}, "-count"},
		{[]string{"raw", "-receivers", "0"}, "-receivers"},
		{[]string{"member"}, "-group"},
		{[]string{"member", "-group", "239.77.60.32:45778", "-members", "0"}, "-members 0: want 1..1024"},
		{[]string{"member", "-group", "239.77.60.32:45778", "-size", "100000000"}, "-size 100000000: larger than the engine's largest message"},
		{[]string{"member", "-group", "239.77.60.32:45778", "-interface", "eth0"}, "-unicast ADDR:PORT is required off loopback"},
		{[]string{"netns", "-mtu", "10"}, "-mtu"},
		{[]string{"netns", "-members", "1"}, "-members"},
		{[]string{"netns", "-plot", "x.jpg"}, "-plot"},
		{[]string{"netns", "-pcap", "x", "-transport", "xdp"}, "-pcap"},
		{[]string{"netns", "-pcap-snaplen", "-1"}, "-pcap-snaplen"},
		{[]string{"throughput", "-plot", "x"}, "-plot"},
		{[]string{"-plot", "x.pdf"}, "-plot"},
		{[]string{"raw-member", "-role", "both", "-group", "239.77.60.30:5000"}, "-role"},
		{[]string{"raw-member", "-role", "send"}, "-group"},
		{[]string{"bogus"}, "unknown mode"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, 2, run(tt.args, &out, &errOut))
			require.Contains(t, errOut.String(), tt.want)
		})
	}
}

// TestXDPOnLoopbackRefusedWithReason: AF_XDP cannot run on loopback; the
// run fails saying why.
func TestXDPOnLoopbackRefusedWithReason(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"throughput", "-transport", "xdp", "-count", "10", "-noraw"}, &out, &errOut))
	require.Contains(t, errOut.String(), "AF_XDP unavailable")
}

// TestMemberGroupHelpNamesIPv6: member mode takes IPv6 groups, and its
// help says which.
func TestMemberGroupHelpNamesIPv6(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"member", "-h"}, &out, &errOut))
	require.Contains(t, errOut.String(), "IPv4 in 239.0.0.0/8, or IPv6 in ff01::/16, ff02::/16")
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

func TestThroughputPlot(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"run.png", "run.svg"} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			f := filepath.Join(dir, name)
			code := run([]string{"throughput", "-count", "3000", "-members", "2", "-noraw", "-plot", f}, &out, &errOut)
			require.Equal(t, 0, code, errOut.String())
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			if strings.HasSuffix(name, ".png") {
				require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "not a PNG")
			} else {
				require.Contains(t, string(b[:min(len(b), 200)]), "<svg")
			}
		})
	}
}

func TestNetnsWithoutIPCommandSaysWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"netns", "-count", "10"}, &out, &errOut))
	require.Contains(t, errOut.String(), "the ip command (iproute2) is not installed")
}

func TestNetnsWithoutRootSaysWhatIsMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		var out, errOut bytes.Buffer
		require.Equal(t, 1, run([]string{"netns", "-count", "10"}, &out, &errOut))
		require.Contains(t, errOut.String(), "needs root")
		return
	}
	// As root: run the command as nobody, if setpriv is there.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("skipping: root, and no setpriv to drop privileges")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", exe, "netns", "-count", "10")
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	outB, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, string(outB))
	require.Equal(t, 1, ee.ExitCode(), string(outB))
	require.Contains(t, string(outB), "needs root")
}

func TestPortInUseIsSaid(t *testing.T) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer c.Close()
	for _, mode := range []string{"member", "raw-member"} {
		t.Run(mode, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := []string{mode, "-group", "239.77.60.31:45777", "-unicast", c.LocalAddr().String(), "-count", "10"}
			if mode == "raw-member" {
				args = append(args, "-role", "send")
			}
			require.Equal(t, 1, run(args, &out, &errOut))
			require.Contains(t, errOut.String(), "address already in use")
			require.Contains(t, errOut.String(), "in use by another process")
			require.Contains(t, errOut.String(), "the group port must be the same non-zero port", "port 0 is offered only for a unicast port")
			require.Empty(t, out.String(), "no result for a member that never opened")
		})
	}
}

func TestNetnsModeLeavesNothingBehind(t *testing.T) {
	if err := bench.CheckNetns(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	t.Setenv(asMainEnv, "1") // the member processes are this binary
	var out, errOut bytes.Buffer
	code := run([]string{"netns", "-count", "3000", "-size", "1024", "-mtu", "9000"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	require.Contains(t, out.String(), "raw  netns mtu 9000")
	require.Regexp(t, `nakcast\s+netns mtu 9000.*\d\.\d\dx\s+yes`, out.String())
	require.Contains(t, out.String(), "verified: 3 members")
	list, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err)
	require.NotContains(t, string(list), bench.NetnsPrefix(), "namespaces left behind")
	ps, err := exec.Command("pgrep", "-P", strconv.Itoa(os.Getpid())).CombinedOutput()
	require.Empty(t, strings.TrimSpace(string(ps)), "child processes left behind (%v)", err)
}

func TestNetnsCtrlCStopsCleanly(t *testing.T) {
	if err := bench.CheckNetns(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "netns", "-duration", "10m", "-noraw")
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	var errOut strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(errOut.String(), "netns: running") {
		n, err := stderr.Read(buf)
		errOut.Write(buf[:n])
		require.NoError(t, err, "exited before running: %s", errOut.String())
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	rest, _ := io.ReadAll(stderr)
	errOut.Write(rest)
	require.NoError(t, cmd.Wait(), errOut.String())
	require.Contains(t, out.String(), "verified: 3 members", "the members finish their streams and report")
	require.Contains(t, errOut.String(), "deleting the namespaces")
	list, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err)
	require.NotContains(t, string(list), fmt.Sprintf("nakcast-%d-", cmd.Process.Pid), "namespaces left behind")
}

// TestProfileAndTraceFiles: MCASTBENCH_CPUPROFILE and MCASTBENCH_TRACE make
// profiled write a CPU profile and an execution trace named PREFIX.PID;
// an unwritable prefix is an error, not a silent run.
func TestProfileAndTraceFiles(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MCASTBENCH_CPUPROFILE", filepath.Join(dir, "cpu"))
	t.Setenv("MCASTBENCH_TRACE", filepath.Join(dir, "trace"))
	ran := false
	if code := profiled(func() int { ran = true; return 0 }); code != 0 || !ran {
		t.Fatalf("profiled: code %d, ran %v", code, ran)
	}
	for _, p := range []string{"cpu", "trace"} {
		fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%s.%d", p, os.Getpid())))
		if err != nil || fi.Size() == 0 {
			t.Fatalf("%s file: %v (size %v)", p, err, fi)
		}
	}
	t.Setenv("MCASTBENCH_CPUPROFILE", "")
	t.Setenv("MCASTBENCH_TRACE", filepath.Join(dir, "missing", "trace"))
	if code := profiled(func() int { t.Fatal("ran without its trace"); return 0 }); code != 1 {
		t.Fatalf("unwritable trace prefix: code %d, want 1", code)
	}
}

// TestKeygen: keygen writes a key file that -key-file reads, mode 0600,
// refuses to overwrite it, and prints no secret.
func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"keygen", "-o", path, "-id", "7", "-bits", "128"}, &out, &errOut), errOut.String())
	keys, _, err := bench.ReadKeyFile(path)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "key 7 (AES-128)", keys[0].String())
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, out.String(), strings.Fields(string(b))[1])
	require.Contains(t, out.String(), "key 7 (AES-128)")
	require.Equal(t, 1, run([]string{"keygen", "-o", path}, &out, &errOut), "no overwrite")
	require.Equal(t, 2, run([]string{"keygen", "-o", path, "-bits", "192"}, &out, &errOut))
	require.Equal(t, 0, run([]string{"throughput", "-key-file", path, "-count", "2000", "-size", "64"}, &out, &errOut), errOut.String())
}
