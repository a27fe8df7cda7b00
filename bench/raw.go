package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nakcast/nakcast/engine/transport"
)

// Raw bundler datagram layout (little-endian):
//
//	0  datagram counter uint64 (1, 2, ... per run)
//	8  message count uint16
//	10 reserved uint16 (0)
//	12 messages: length uint16, then that many bytes, repeated to the end
const (
	rawHeaderLen = 12
	rawLenPrefix = 2
)

// Errors of the raw datagram parser.
var (
	ErrRawTruncated = errors.New("bench: raw datagram truncated")
	ErrRawCount     = errors.New("bench: raw datagram message count does not match its contents")
)

// DefaultRawGroup is the group the raw baselines use unless told otherwise;
// port 0 lets the first receiver pick a free port.
var DefaultRawGroup = netip.MustParseAddrPort("239.77.50.1:0")

// RawConfig configures RunRaw. Zero fields take the defaults named.
type RawConfig struct {
	// Group is the multicast group (default DefaultRawGroup; port 0 picks a
	// free port).
	Group netip.AddrPort
	// Interface to multicast on (default "lo").
	Interface string
	// Unicast is the address the sockets bind to for sending (default
	// 127.0.0.1:0); off loopback it must be the interface's own address,
	// or the kernel drops what is sent from 127.0.0.1.
	Unicast netip.AddrPort
	// TTL is the multicast TTL (default 0: loopback; 1 across a bridge).
	TTL int
	// AllowNonLoopback lets the bundler use a non-loopback interface and
	// unicast address (transport.Config.AllowNonLoopback). Only ever set
	// inside network namespaces this program created (RunNetnsRaw).
	AllowNonLoopback bool
	// MsgSize is the size of each message (default 64).
	MsgSize int
	// DatagramSize is the UDP payload size messages are packed into
	// (default 65507, the IPv4 maximum).
	DatagramSize int
	// Duration is how long the sender sends (default 1 s when Count is 0).
	Duration time.Duration
	// Count, when positive, is the number of messages to send; the sender
	// stops at Count or Duration, whichever comes first (Duration is then
	// unlimited unless set).
	Count int64
	// Batch is the number of datagrams per sendmmsg and recvmmsg (default 8).
	Batch int
	// Receivers is the number of receiving members (default 1).
	Receivers int
	// RecvBuffer is SO_RCVBUF for the receivers (default 4 MiB; forced past
	// net.core.rmem_max as root).
	RecvBuffer int
	// Drain is how long receivers may go without a datagram, once the
	// sender has finished, before the run ends (default 200 ms).
	Drain time.Duration
	// BusyPoll makes the receivers spin on TryReadBatch instead of
	// blocking in ReadBatch (each keeps a core busy).
	BusyPoll bool
	// NoGSO sends every datagram through the kernel on its own
	// (transport.Config.NoGSO) and reads them one by one (no GRO): the
	// bundler the engine's issue defines, sendmmsg out, recvmmsg in.
	// Default: the same segmentation offloads as the engine (GSO, and GRO
	// for datagrams up to 16 KB), so that both run on the same path.
	NoGSO bool
	// Transport is the backend of the multi-process bundler
	// (RunRawMember): "udp" (default) or "xdp", the AF_XDP backend (an
	// Ethernet interface, TTL 1 or more, root).
	Transport string
}

// RawResult is what RunRaw measured. Receiver figures are the worst
// receiver's: its messages, its rate, its loss.
type RawResult struct {
	// Msgs, Bytes and Datagrams are what the slowest receiver got and
	// parsed (Bytes counts message payload bytes).
	Msgs, Bytes, Datagrams int64
	// SentMsgs and SentDatagrams are what the sender sent.
	SentMsgs, SentDatagrams int64
	// MsgsPerDatagram is how many messages fit one full datagram.
	MsgsPerDatagram int
	// Elapsed runs from the first send to the last datagram the slowest
	// receiver got.
	Elapsed time.Duration
	// SendElapsed is how long the sender took.
	SendElapsed time.Duration
	// MsgsPerSec and MBPerSec are the slowest receiver's message and
	// payload rates (MB = 1e6 bytes).
	MsgsPerSec, MBPerSec float64
	// SendMsgsPerSec is the sender's rate.
	SendMsgsPerSec float64
	// LossPct is the worst receiver's share of datagrams not received.
	LossPct float64
	// Malformed counts datagrams that failed to parse (0 unless something
	// else sends to the group).
	Malformed int64
	// Checksum is the sum over received messages of their first bytes, a
	// guard that the parse really reads them.
	Checksum uint64
	// RecvBuffer is the receivers' SO_RCVBUF as the kernel reports it
	// (twice the size set, on Linux).
	RecvBuffer int
	// RecvCPUNs is the receivers' process CPU per datagram they read
	// (multi-process runs; 0 otherwise).
	RecvCPUNs float64
}

func (c RawConfig) withDefaults() (RawConfig, error) {
	if !c.Group.IsValid() {
		c.Group = DefaultRawGroup
	}
	if c.MsgSize == 0 {
		c.MsgSize = 64
	}
	if c.DatagramSize == 0 {
		c.DatagramSize = transport.MaxUDPPayloadIPv4
	}
	maxDatagram := transport.MaxUDPPayloadIPv4
	if c.Group.Addr().Is6() {
		maxDatagram = transport.MaxUDPPayloadIPv6
	}
	if c.DatagramSize < rawHeaderLen+rawLenPrefix+1 || c.DatagramSize > maxDatagram {
		return c, fmt.Errorf("bench: RawConfig.DatagramSize %d: want %d..%d", c.DatagramSize, rawHeaderLen+rawLenPrefix+1, maxDatagram)
	}
	if maxMsg := min(c.DatagramSize-rawHeaderLen-rawLenPrefix, 0xffff); c.MsgSize < 1 || c.MsgSize > maxMsg {
		return c, fmt.Errorf("bench: RawConfig.MsgSize %d: want 1..%d for DatagramSize %d", c.MsgSize, maxMsg, c.DatagramSize)
	}
	if c.Count < 0 {
		return c, fmt.Errorf("bench: RawConfig.Count %d: want >= 0", c.Count)
	}
	if c.Duration < 0 {
		return c, fmt.Errorf("bench: RawConfig.Duration %v: want >= 0", c.Duration)
	}
	if c.Duration == 0 && c.Count == 0 {
		c.Duration = time.Second
	}
	if c.Batch == 0 {
		c.Batch = 8
	}
	if c.Batch < 1 || c.Batch > transport.MaxBatchSize {
		return c, fmt.Errorf("bench: RawConfig.Batch %d: want 1..%d", c.Batch, transport.MaxBatchSize)
	}
	if c.Receivers == 0 {
		c.Receivers = 1
	}
	if c.Receivers < 1 || c.Receivers > 64 {
		return c, fmt.Errorf("bench: RawConfig.Receivers %d: want 1..64", c.Receivers)
	}
	if c.RecvBuffer == 0 {
		c.RecvBuffer = transport.DefaultBufferSize
	}
	if c.Drain == 0 {
		c.Drain = 200 * time.Millisecond
	}
	if c.Drain < 0 {
		return c, fmt.Errorf("bench: RawConfig.Drain %v: want > 0", c.Drain)
	}
	return c, nil
}

// rawReceiver is one receiving member's state; the counters are atomics so
// the run's coordinator can watch them.
type rawReceiver struct {
	t         transport.Transport
	msgs      atomic.Int64
	bytes     atomic.Int64
	datagrams atomic.Int64
	malformed atomic.Int64
	last      atomic.Int64 // time of the last datagram, ns since the run's start (Nanotime less the start given to run)
	checksum  uint64
	err       error
}

// RunRaw runs the raw bundler: one sender packs MsgSize messages into
// DatagramSize datagrams and multicasts them Batch at a time with sendmmsg;
// Receivers members read them Batch at a time with recvmmsg and parse every
// message (walk the length prefixes, read each message's first bytes). All
// in this process, over cfg.Interface. Cancelling ctx stops the sender
// early; the result covers what was sent until then.
func RunRaw(ctx context.Context, cfg RawConfig) (RawResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return RawResult{}, err
	}
	recvs := make([]*rawReceiver, cfg.Receivers)
	defer func() {
		for _, r := range recvs {
			if r != nil {
				_ = r.t.Close()
			}
		}
	}()
	group := cfg.Group
	recvBuf := 0
	for i := range recvs {
		t, err := transport.Open(cfg.transportConfig(group, false))
		if err != nil {
			return RawResult{}, fmt.Errorf("bench: receiver %d: %w", i, err)
		}
		group, recvBuf = t.Group(), t.Info().GroupRecvBuffer
		recvs[i] = &rawReceiver{t: t}
	}
	snd, err := transport.Open(cfg.transportConfig(group, true))
	if err != nil {
		return RawResult{}, fmt.Errorf("bench: sender: %w", err)
	}
	defer snd.Close()

	start, startNs := time.Now(), Nanotime()
	var wg sync.WaitGroup
	for _, r := range recvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(cfg, startNs)
		}()
	}

	sent, sendErr := sendRaw(ctx, snd, cfg)
	sendElapsed := time.Since(start)

	// Wait until every receiver has every datagram, or none has made
	// progress for Drain.
	lastProgress, lastTotal := time.Now(), int64(-1)
	for {
		total, complete := int64(0), true
		for _, r := range recvs {
			d := r.datagrams.Load() + r.malformed.Load()
			total += d
			complete = complete && d >= sent.datagrams
		}
		if complete || sendErr != nil {
			break
		}
		if total != lastTotal {
			lastTotal, lastProgress = total, time.Now()
		} else if time.Since(lastProgress) > cfg.Drain {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for _, r := range recvs {
		_ = r.t.Close()
	}
	wg.Wait()
	if sendErr != nil {
		return RawResult{}, fmt.Errorf("bench: sender: %w", sendErr)
	}

	res := RawResult{
		SentMsgs:        sent.msgs,
		SentDatagrams:   sent.datagrams,
		MsgsPerDatagram: msgsPerDatagram(cfg.DatagramSize, cfg.MsgSize),
		SendElapsed:     sendElapsed,
		Msgs:            -1,
		RecvBuffer:      recvBuf,
	}
	if sendElapsed > 0 {
		res.SendMsgsPerSec = float64(sent.msgs) / sendElapsed.Seconds()
	}
	for i, r := range recvs {
		if r.err != nil {
			return RawResult{}, fmt.Errorf("bench: receiver %d: %w", i, r.err)
		}
		msgs := r.msgs.Load()
		elapsed := time.Duration(r.last.Load())
		rate := 0.0
		if elapsed > 0 {
			rate = float64(msgs) / elapsed.Seconds()
		}
		if res.Msgs < 0 || rate < res.MsgsPerSec {
			res.Msgs, res.Bytes, res.Datagrams = msgs, r.bytes.Load(), r.datagrams.Load()
			res.Elapsed, res.MsgsPerSec = elapsed, rate
			res.MBPerSec = float64(res.Bytes) / elapsed.Seconds() / 1e6
			if elapsed <= 0 {
				res.MBPerSec = 0
			}
		}
		if sent.datagrams > 0 {
			res.LossPct = max(res.LossPct, 100*float64(sent.datagrams-r.datagrams.Load())/float64(sent.datagrams))
		}
		res.Malformed += r.malformed.Load()
		res.Checksum += r.checksum
	}
	return res, nil
}

// transportConfig is the transport of a raw receiver (sendOnly false) or
// sender.
func (c RawConfig) transportConfig(group netip.AddrPort, sendOnly bool) transport.Config {
	tc := transport.Config{Group: group, Interface: c.Interface, Unicast: c.Unicast, TTL: c.TTL, BatchSize: c.Batch,
		SendOnly: sendOnly, AllowNonLoopback: c.AllowNonLoopback, NoGSO: c.NoGSO}
	if !sendOnly {
		tc.RecvBuffer = c.RecvBuffer
		// The engine's rule (engine.Config.Transport.NoGSO): receive offload with
		// small datagrams, so that both read runs the same way.
		tc.GRO = !c.NoGSO && c.DatagramSize <= transport.GROMaxDatagram
	}
	return tc
}

func msgsPerDatagram(datagram, msg int) int {
	return (datagram - rawHeaderLen) / (rawLenPrefix + msg)
}

type rawSent struct{ msgs, datagrams int64 }

// sendRaw is the sender: fill Batch datagrams with messages, sendmmsg them,
// repeat until Count or Duration.
func sendRaw(ctx context.Context, t transport.Transport, cfg RawConfig) (rawSent, error) {
	bufs := make([][]byte, cfg.Batch)
	for i := range bufs {
		bufs[i] = make([]byte, cfg.DatagramSize)
	}
	payload := make([]byte, cfg.MsgSize)
	for i := range payload {
		payload[i] = byte(i)
	}
	perDatagram := int64(msgsPerDatagram(cfg.DatagramSize, cfg.MsgSize))
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = time.Now().Add(cfg.Duration)
	}
	var s rawSent
	out := bufs[:0]
	for {
		out = out[:0]
		for len(out) < len(bufs) {
			n := perDatagram
			if cfg.Count > 0 {
				n = min(n, cfg.Count-s.msgs)
			}
			if n <= 0 {
				break
			}
			s.datagrams++
			out = append(out, fillRaw(bufs[len(out)], uint64(s.datagrams), uint64(s.msgs), int(n), payload))
			s.msgs += n
		}
		if len(out) == 0 {
			return s, nil
		}
		if _, err := t.WriteBatch(out, nil); err != nil {
			return s, err
		}
		if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			return s, nil
		}
	}
}

// fillRaw writes datagram seq holding n messages into buf, each a copy of
// payload stamped with its message number, and returns the datagram.
func fillRaw(buf []byte, seq, firstMsg uint64, n int, payload []byte) []byte {
	binary.LittleEndian.PutUint64(buf[0:8], seq)
	binary.LittleEndian.PutUint16(buf[8:10], uint16(n))
	binary.LittleEndian.PutUint16(buf[10:12], 0)
	off := rawHeaderLen
	size := len(payload)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(buf[off:], uint16(size))
		m := buf[off+rawLenPrefix : off+rawLenPrefix+size]
		copy(m, payload)
		if size >= 8 {
			binary.LittleEndian.PutUint64(m, firstMsg+uint64(i))
		}
		off += rawLenPrefix + size
	}
	return buf[:off]
}

// parseRaw walks a raw datagram: every message's length is checked and its
// first bytes (up to 8) are read into the checksum.
func parseRaw(b []byte) (seq uint64, msgs int, bytes int, sum uint64, err error) {
	if len(b) < rawHeaderLen {
		return 0, 0, 0, 0, ErrRawTruncated
	}
	seq = binary.LittleEndian.Uint64(b[0:8])
	count := int(binary.LittleEndian.Uint16(b[8:10]))
	p := b[rawHeaderLen:]
	for len(p) > 0 {
		if len(p) < rawLenPrefix {
			return seq, msgs, bytes, sum, ErrRawTruncated
		}
		n := int(binary.LittleEndian.Uint16(p))
		p = p[rawLenPrefix:]
		if n > len(p) {
			return seq, msgs, bytes, sum, ErrRawTruncated
		}
		m := p[:n]
		if n >= 8 {
			sum += binary.LittleEndian.Uint64(m)
		} else if n > 0 {
			sum += uint64(m[0])
		}
		msgs++
		bytes += n
		p = p[n:]
	}
	if msgs != count {
		return seq, msgs, bytes, sum, ErrRawCount
	}
	return seq, msgs, bytes, sum, nil
}

// run is a receiver: read batches until the transport is closed, parse
// every message, publish the counts. last is Nanotime() less startNs.
func (r *rawReceiver) run(cfg RawConfig, startNs int64) {
	bufs := make([][]byte, cfg.Batch)
	for i := range bufs {
		bufs[i] = make([]byte, cfg.DatagramSize)
	}
	sizes := make([]int, cfg.Batch)
	var msgs, bytes, datagrams, malformed int64
	for {
		var n int
		var err error
		if cfg.BusyPoll {
			n, err = r.t.TryReadBatch(bufs, sizes, nil)
			if n == 0 && err == nil {
				continue
			}
		} else {
			n, err = r.t.ReadBatch(bufs, sizes, nil)
		}
		if err != nil {
			if !errors.Is(err, transport.ErrClosed) {
				r.err = err
			}
			return
		}
		for i := 0; i < n; i++ {
			_, m, b, sum, err := parseRaw(bufs[i][:sizes[i]])
			if err != nil {
				malformed++
				continue
			}
			msgs += int64(m)
			bytes += int64(b)
			datagrams++
			r.checksum += sum
		}
		r.last.Store(Nanotime() - startNs)
		r.msgs.Store(msgs)
		r.bytes.Store(bytes)
		r.malformed.Store(malformed)
		r.datagrams.Store(datagrams) // last: the coordinator's completion check reads it
	}
}
