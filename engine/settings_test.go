package engine

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// settingsMarkdown renders the table of numeric settings for docs/config.md.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| Setting | Default | Allowed | What |\n| --- | --- | --- | --- |\n")
	for _, s := range settingsTable {
		var c Config
		f := s.field(&c)
		def := human(s, f, s.def)
		if s.defFn != nil {
			def = s.defDoc
		}
		lo, hi := s.lo, s.hi
		if s.loFn != nil {
			lo = 0
		}
		allowed := s.bounds(f, lo, hi)
		if !f.dur && hi != unbounded {
			allowed = strings.Replace(allowed, s.format(f, lo)+".."+s.format(f, hi), human(s, f, lo)+".."+human(s, f, hi), 1)
		}
		if s.loFn != nil || s.hiFn != nil {
			allowed += " (see What)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.name, def, allowed, s.doc)
	}
	return b.String()
}

// human formats sizes of a MiB or more in MiB (GiB, TiB), else as errors
// do.
func human(s setting, f ref, v int64) string {
	if f.dur || v < 1<<20 || v%(1<<20) != 0 || !strings.Contains(s.name, "Bytes") && !strings.Contains(s.name, "Buffer") {
		return s.format(f, v)
	}
	for _, u := range []struct {
		unit  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}} {
		if v%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", v>>u.shift, u.unit)
		}
	}
	return s.format(f, v)
}

// TestDocsSettings: docs/config.md's table of settings is the table the
// engine applies (regenerate it from the failure's output).
func TestDocsSettings(t *testing.T) {
	readme, err := os.ReadFile("../docs/config.md")
	require.NoError(t, err)
	want := settingsMarkdown()
	require.True(t, strings.Contains(string(readme), want), "docs/config.md's table of settings differs; it should read:\n%s", want)
}

// TestSettingsTable: every row names a field of Config as written, its
// default is within its bounds, and no field is listed twice.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settingsTable {
		require.False(t, seen[s.name], "%s listed twice", s.name)
		seen[s.name] = true
		require.NotEmpty(t, s.doc, s.name)
		require.True(t, s.defFn == nil || s.defDoc != "", "%s: a computed default says what it is", s.name)
		var c Config
		f := s.field(&c)
		f.set(12345)
		require.Equal(t, int64(12345), s.field(&c).get(), "%s reads the field it writes", s.name)
		if s.defFn == nil {
			require.GreaterOrEqual(t, s.def, s.lo, s.name)
			require.LessOrEqual(t, s.def, s.hi, s.name)
		}
		require.Contains(t, []string{"Network", "Membership", "Transport", "Tuning", "Agent"}, strings.Split(s.name, ".")[0], s.name)
	}
}

// TestMemberConfigRoundTrip: Member.Config returns the layered Config
// resolved, which Open accepts as it is.
func TestMemberConfigRoundTrip(t *testing.T) {
	ids := testMembers(1)
	c := Config{Group: testGroup(), Self: ids[0], Logger: quietLogger(), Membership: MembershipConfig{Members: ids},
		Tuning: TuningConfig{Window: 1024}, Agent: AgentConfig{Idle: IdleYield}}
	overMem(&c, none)
	m, err := Open(t.Context(), c)
	require.NoError(t, err)
	got := m.Config()
	require.NoError(t, m.Close(t.Context()))
	require.Equal(t, 1024, got.Tuning.Window)
	require.Equal(t, IdleYield, got.Agent.Idle)
	require.Equal(t, DefaultNakDelay, got.Tuning.NakDelay, "defaults filled in")
	require.Equal(t, ids, got.Membership.Members)
	require.NotNil(t, got.Transport.Open)
	r, err := got.resolve()
	require.NoError(t, err)
	require.Equal(t, got.Tuning, r.TuningConfig, "resolving a resolved Config changes nothing")
	require.Equal(t, got.Membership.DiscoveryRounds, r.DiscoveryRounds)
}
