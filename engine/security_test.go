package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nakcast/nakcast/digest"
	"github.com/nakcast/nakcast/engine/auth"
	"github.com/nakcast/nakcast/engine/transport/memtransport"
	"github.com/nakcast/nakcast/wire"
)

// testKeys returns keys with ids 1..n and fresh random secrets.
func testKeys(t testing.TB, n int) []Key {
	t.Helper()
	keys := make([]Key, n)
	for i := range keys {
		k, err := auth.GenerateKey(uint16(i + 1))
		require.NoError(t, err)
		keys[i] = k
	}
	return keys
}

// TestKeyedGroupDeliversExactly: three members with a key, each sending
// (bundles, a fragmented message, repairs under injected loss), deliver
// every message of every sender exactly once and in order, signed and
// encrypted, and refuse nothing.
func TestKeyedGroupDeliversExactly(t *testing.T) {
	for _, tc := range []struct {
		encrypt bool
		thr     Threading
	}{{false, ThreadingShared}, {true, ThreadingShared}, {false, ThreadingDedicated}, {true, ThreadingDedicated}} {
		encrypt := tc.encrypt
		t.Run(map[bool]string{false: "signed", true: "encrypted"}[encrypt]+"/"+tc.thr.String(), func(t *testing.T) {
			const n, big = 3000, 200 << 10
			keys := testKeys(t, 1)
			recs := []*recorder{newRecorder(3 * (n + 1)), newRecorder(3 * (n + 1)), newRecorder(3 * (n + 1))}
			ms := openGroup(t, 3, func(i int, c *Config) {
				c.Keys, c.Encrypt, c.Handler, c.Agent.Threading = keys, encrypt, recs[i], tc.thr
				overMem(c, memtransport.Faults{Loss: 0.05, Seed: uint64(i + 1)})
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for k, m := range ms {
				wg.Go(func() {
					for i := range n {
						if err := m.Send(ctx, payloadOf(k, i, 10+i%1500)); err != nil {
							t.Error(err)
							return
						}
					}
					if err := m.Send(ctx, payloadOf(k, n, big)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for i, r := range recs {
				require.NoError(t, r.waitFor(ctx, func() bool { return r.total == r.want }), "member %d got %d of %d", i, r.total, r.want)
			}
			for k, m := range ms {
				want := expectedHash(n+1, func(i int) []byte {
					if i == n {
						return payloadOf(k, n, big)
					}
					return payloadOf(k, i, 10+i%1500)
				})
				for i, r := range recs {
					r.mu.Lock()
					require.Empty(t, r.errs, "member %d", i)
					require.Equal(t, n+1, r.count[m.Self()], "member %d from %d", i, k)
					require.Equal(t, want, r.hash[m.Self()], "member %d from %d", i, k)
					r.mu.Unlock()
				}
			}
			for i, m := range ms {
				s := m.Stats()
				require.Zero(t, s.Drops.Auth.Total(), "member %d: %+v", i, s.Drops.Auth)
				require.Equal(t, map[bool]string{false: "signed", true: "encrypted"}[encrypt], s.Auth.Mode)
				require.Equal(t, uint16(1), s.Auth.KeyID)
				require.Equal(t, 2, s.Auth.Senders, "member %d: the two others (own datagrams are filtered)", i)
				require.Positive(t, s.Retransmitted+ms[(i+1)%3].Stats().Retransmitted+ms[(i+2)%3].Stats().Retransmitted, "loss was repaired")
			}
		})
	}
}

// TestStrangersDeliverNothing: in a static view of four, A and B share the
// key, C has another secret under the same key id, D has no key. A and B
// deliver everything A sends; C and D deliver nothing; A counts C's
// datagrams as BadTag and D's as NoTrailer, C counts A's as BadTag, D
// counts them as NoKey.
func TestStrangersDeliverNothing(t *testing.T) {
	keys := testKeys(t, 1)
	other := testKeys(t, 1)
	g := testGroup()
	ids := testMembers(4)
	recs := []*recorder{newRecorder(200), newRecorder(200), newRecorder(-1), newRecorder(-1)}
	ms := make([]*Member, 4)
	for i := range ms {
		c := Config{Group: g, Self: ids[i], Logger: quietLogger(), Handler: recs[i], Membership: MembershipConfig{Members: ids}, Tuning: TuningConfig{StableInterval: time.Millisecond}}
		switch i {
		case 0, 1:
			c.Keys = keys
		case 2:
			c.Keys = other
		}
		m, err := Open(context.Background(), c)
		require.NoError(t, err)
		ms[i] = m
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		for _, m := range ms {
			_ = m.Close(ctx) // C and D never deliver: nothing is stable, the drain times out
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 200 {
		require.NoError(t, ms[0].Send(ctx, payloadOf(0, i, 100)))
	}
	for _, r := range recs[:2] {
		require.NoError(t, r.waitFor(ctx, func() bool { return r.total == 200 }))
	}
	// Wait until C's and D's STABLE reports have reached A, and A's data
	// has reached C and D, then check that nothing got through.
	require.NoError(t, waitStats(ctx, ms[0], func(s Stats) bool { return s.Drops.Auth.BadTag > 0 && s.Drops.Auth.NoTrailer > 0 }))
	require.NoError(t, waitStats(ctx, ms[2], func(s Stats) bool { return s.Drops.Auth.BadTag > 0 }))
	require.NoError(t, waitStats(ctx, ms[3], func(s Stats) bool { return s.Drops.Auth.NoKey > 0 }))
	for i := 2; i < 4; i++ {
		s := ms[i].Stats()
		require.Zero(t, s.Delivered, "member %d", i)
		require.Zero(t, recs[i].total, "member %d", i)
		require.Zero(t, s.NakReceived+s.Protocol.Drops.WrongView, "member %d: nothing reached its protocol", i)
	}
	a := ms[0].Stats()
	require.Zero(t, a.Drops.Auth.NoKey+a.Drops.Auth.Replay+a.Drops.Auth.TooOld)
	require.Equal(t, 1, a.Auth.Senders, "only B has a replay window at A")
}

// waitStats polls m's Stats until cond holds or ctx ends.
func waitStats(ctx context.Context, m *Member, cond func(Stats) bool) error {
	for !cond(m.Stats()) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: last %+v", ctx.Err(), m.Stats().Drops)
		case <-time.After(time.Millisecond): // polling a condition with a bound, not synchronisation
		}
	}
	return nil
}

// TestSetKeysRotation rotates two running members from key 1 to key 2 in
// the three steps while A sends: everything is delivered; once B retired
// key 1, a member still sealing under it is refused (UnknownKey).
//
// The members are on memNet, where each reads one FIFO queue: once B has
// delivered what A sent after sealing under key 2, B has read everything A
// sealed under key 1 before it. Over UDP a unicast datagram (an echo of
// B's address probe at Open) can wait in B's unicast socket, which B
// reads every fourth call, until after B retired key 1, and is then
// refused as it should be.
func TestSetKeysRotation(t *testing.T) {
	keys := testKeys(t, 2)
	k1, k2 := keys[0], keys[1]
	recs := []*recorder{newRecorder(-1), newRecorder(-1)}
	ms := openGroup(t, 2, func(i int, c *Config) {
		c.Keys, c.Handler = []Key{k1}, recs[i]
		overMem(c, none)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := 0
	send := func(n int) {
		for range n {
			require.NoError(t, ms[0].Send(ctx, payloadOf(0, sent, 200)))
			sent++
		}
		for _, r := range recs {
			require.NoError(t, r.waitFor(ctx, func() bool { return r.total == sent }))
		}
	}
	send(100)
	for _, m := range ms {
		require.NoError(t, m.SetKeys([]Key{k1, k2}))
	}
	send(100)
	for _, m := range ms {
		require.NoError(t, m.SetKeys([]Key{k2, k1}))
		require.Equal(t, uint16(2), m.Stats().Auth.KeyID)
	}
	send(100)
	require.NoError(t, ms[1].SetKeys([]Key{k2}))
	send(100)
	// A drop here names its reason: an old-key datagram still in flight
	// (UnknownKey), a replay window (Replay, TooOld) or the derivation
	// budget (Throttled).
	require.Zero(t, ms[1].Stats().Drops.Auth.Total(), "B's auth drops: %+v", ms[1].Stats().Drops.Auth)
	// A falls back to key 1 alone: B refuses it from now on.
	require.NoError(t, ms[0].SetKeys([]Key{k1}))
	require.NoError(t, ms[0].Send(ctx, payloadOf(0, sent, 200)))
	require.NoError(t, waitStats(ctx, ms[1], func(s Stats) bool { return s.Drops.Auth.UnknownKey > 0 }))
	recs[1].mu.Lock()
	require.Equal(t, sent, recs[1].total)
	recs[1].mu.Unlock()
	// Back on key 2, A's refused message is repaired.
	require.NoError(t, ms[0].SetKeys([]Key{k2}))
	sent++
	require.NoError(t, recs[1].waitFor(ctx, func() bool { return recs[1].total == sent }))
	require.ErrorIs(t, ms[0].SetKeys(nil), ErrInvalidConfig)
	open := openGroup(t, 1, nil)
	require.ErrorIs(t, open[0].SetKeys([]Key{k1}), ErrInvalidConfig)
}

func TestConfigKeys(t *testing.T) {
	keys := testKeys(t, 2)
	off := netip.MustParseAddrPort("10.1.2.3:0")
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"open on loopback", Config{}, true},
		{"keyed on loopback", Config{Keys: keys}, true},
		{"encrypted", Config{Keys: keys[:1], Encrypt: true}, true},
		{"open off loopback refused", Config{Network: NetworkConfig{Unicast: off, AllowNonLoopback: true}}, false},
		{"insecure off loopback", Config{Insecure: true, Network: NetworkConfig{Unicast: off, AllowNonLoopback: true}}, true},
		{"keyed off loopback", Config{Keys: keys, Network: NetworkConfig{Unicast: off, AllowNonLoopback: true}}, true},
		{"insecure with keys", Config{Keys: keys, Insecure: true}, false},
		{"encrypt without keys", Config{Encrypt: true}, false},
		{"zero key", Config{Keys: []Key{{}}}, false},
		{"duplicate key ids", Config{Keys: []Key{keys[0], keys[0]}}, false},
		{"too many keys", Config{Keys: append(testKeys(t, 4), keys[0])}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidConfig)
			}
		})
	}
}

// TestKeyNeverShown: the secret appears in no log line (debug level
// included), no print of the Config or Stats, no JSON of them.
func TestKeyNeverShown(t *testing.T) {
	keys := testKeys(t, 2)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfgs := make([]Config, 2)
	ms := openGroup(t, 2, func(i int, c *Config) { c.Keys, c.Encrypt, c.Logger = keys, true, logger; cfgs[i] = *c })
	require.NoError(t, ms[0].Send(context.Background(), []byte("hello")))
	require.NoError(t, ms[0].SetKeys([]Key{keys[1], keys[0]}))
	logger.Info("config", "cfg", cfgs[0], "keys", keys)
	st := ms[0].Stats()
	js, err := json.Marshal(struct { // Config as a whole has func fields
		K []Key
		S Stats
	}{cfgs[0].Keys, st})
	require.NoError(t, err)
	mu.Lock()
	out := []string{logs.String(), string(js), fmt.Sprintf("%v %+v %#v", cfgs[0], cfgs[0], cfgs[0]), fmt.Sprintf("%+v %#v", st, st)}
	mu.Unlock()
	require.Contains(t, out[0], "datagrams authenticated", "the mode is logged")
	for _, k := range keys {
		var b bytes.Buffer
		require.NoError(t, auth.WriteKeys(&b, []Key{k}))
		secret := strings.Fields(b.String())[1]
		raw, err := hex.DecodeString(secret)
		require.NoError(t, err)
		for _, s := range out {
			require.NotContains(t, strings.ToLower(s), secret)
			require.NotContains(t, s, fmt.Sprint(raw))
			require.NotContains(t, s, string(raw))
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestInsecureWarnsOnce: open mode chosen with Insecure says so once, at
// Open, at warning level.
func TestInsecureWarnsOnce(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	ms := openGroup(t, 1, func(_ int, c *Config) { c.Insecure, c.Logger = true, logger })
	require.NoError(t, ms[0].Send(context.Background(), []byte("x")))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "insecure"), logs.String())
	require.Contains(t, logs.String(), "level=WARN")
}

// TestKeyedExactDeliveryJoined: members joined through gms with a key,
// encrypted (membership datagrams sealed too), 5% loss: exact delivery.
func TestKeyedExactDeliveryJoined(t *testing.T) {
	testExactDeliveryJoined(t, ThreadingShared, testKeys(t, 1))
}

// TestKeyedStateTransferLateJoiner: a joiner fetches the state from keyed
// members (state transfer datagrams sealed too).
func TestKeyedStateTransferLateJoiner(t *testing.T) {
	testStateTransferLateJoiner(t, ThreadingShared, testKeys(t, 1))
}

// TestStrangerCannotJoin: a member with another secret under the same key
// id finds nobody (it founds a group of its own) and the keyed members'
// view is unchanged; they count its discovery datagrams as BadTag.
func TestStrangerCannotJoin(t *testing.T) {
	keys := testKeys(t, 1)
	g := testGroup()
	ms := []*Member{openOne(t, g, 0, func(_ int, c *Config) { c.Keys = keys }), openOne(t, g, 1, func(_ int, c *Config) { c.Keys = keys })}
	defer closeInOrder(t, ms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitViewSize(t, ctx, ms[1], 2)
	stranger := openOne(t, g, 2, func(_ int, c *Config) { c.Keys = testKeys(t, 1) })
	defer closeInOrder(t, []*Member{stranger})
	_, v := stranger.View()
	require.Equal(t, []digest.Member{stranger.Self()}, v, "the stranger founded a group of its own")
	require.NoError(t, waitStats(ctx, ms[0], func(s Stats) bool { return s.Drops.Auth.BadTag > 0 }))
	for _, m := range ms {
		_, v := m.View()
		require.Len(t, v, 2)
	}
	require.Zero(t, stranger.Stats().Delivered)
}

// TestSealPathFollowsDestination: a datagram of the write batch with a
// destination is sealed on the unicast path, one without (the group) on
// the group path, in place or copied, signed and encrypted, so that a
// receiver keeps each socket's datagrams in a replay window of its own.
func TestSealPathFollowsDestination(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		sec, err := newSecurity(&settings{NetworkConfig: NetworkConfig{GroupID: 7}, Keys: testKeys(t, 1), Encrypt: encrypt})
		require.NoError(t, err)
		pool := wire.NewPool(0, 0)
		var w wbatch
		w.init(4)
		dsts := []netip.AddrPort{{}, netip.MustParseAddrPort("127.0.0.1:4000"), {}, netip.MustParseAddrPort("127.0.0.2:4000")}
		for i, dst := range dsts {
			var b *wire.Buffer // nil: gms's bytes, sealed into a copy
			buf := make([]byte, wire.HeartbeatOverhead+wire.TrailerLen)
			if i < 2 {
				b = pool.Get(len(buf)) // the protocol's: signed in place
				buf = b.B
			}
			d, err := wire.EncodeHeartbeat(buf, wire.Header{Group: 7, Sender: digest.Member{ID: 1, Inc: 1}}, wire.Heartbeat{})
			require.NoError(t, err)
			if b != nil {
				b.N = len(d)
			}
			w.q, w.b, w.dsts = append(w.q, b), append(w.b, d), append(w.dsts, dst)
		}
		var ctr counters
		sec.seal(&w, pool, &ctr)
		require.Len(t, w.b, len(dsts))
		for i, d := range w.b {
			sl, ok := wire.SplitSealed(d)
			require.True(t, ok)
			unicast := wire.NonceCounter(sl.Nonce)&wire.NonceUnicast != 0
			require.Equal(t, dsts[i].IsValid(), unicast, "datagram %d (encrypt %v)", i, encrypt)
		}
	}
}
